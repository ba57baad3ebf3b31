"""The GPU producer's rounds and what it sends between them: an Xid injected through the control file
goes out at once, on a sample of its GPU, not at the next round."""

from __future__ import annotations

from pathlib import Path

from trainmedic.producers.control import ControlFile
from trainmedic.producers.gpu_producer import GpuProducer
from trainmedic.producers.synthetic import SyntheticGpus

T0 = 1_700_000_000.0


class Sent:
    """An outbox stand-in that keeps what it was given."""

    def __init__(self) -> None:
        self.samples: list = []

    def send(self, topic: str, sample: object, key: str) -> None:
        self.samples.append((topic, key, sample))

    def poll(self) -> None:
        """Nothing is on its way."""


def test_an_xid_appended_between_rounds_is_sent_at_once_on_its_gpu_s_sample(tmp_path: Path) -> None:
    control_path = tmp_path / "ctl"
    control_path.write_text("")
    sent = Sent()
    producer = GpuProducer(SyntheticGpus(["n01", "n02"], 2, start=T0), sent, "gpu",  # type: ignore[arg-type]
                           ControlFile.at_end(control_path))
    producer.round(T0 + 1)
    assert len(sent.samples) == 4
    producer.between(T0 + 1.05)
    assert len(sent.samples) == 4  # nothing new: nothing sent between rounds
    with control_path.open("a") as file:
        file.write("xid=79,node=n02,gpu=1\n")
    producer.between(T0 + 1.1)
    assert [(topic, key, s.gpu, s.xids, s.ts) for topic, key, s in sent.samples[4:]] == [
        ("gpu", "n02", 1, (79,), T0 + 1.1)]
    producer.round(T0 + 2)
    assert all(s.xids == () for _, _, s in sent.samples[5:]) and len(sent.samples) == 9
