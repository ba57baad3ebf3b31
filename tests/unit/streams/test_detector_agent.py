"""The Faust agent in memory (`test_context`): telemetry in, incidents and dead letters out; and
its checkpoints, restored on the first rebalance and saved after what was sent before them."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from faust.types import TP

import trainmedic.schemas as s
from tests.unit.streams.test_scenarios import SCENARIOS
from trainmedic.bus.message import RawMessage
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.streams.checkpoints.contents import Owner, decode_checkpoint, encode_checkpoint
from trainmedic.streams.checkpoints.faust_engine import FaustCheckpoints
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.faust_app import FaustTuning, build_app
from trainmedic.streams.live import LiveConfig, LiveDetector

SETTINGS = KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix="mem.")


def run_agent(lines: list[bytes]) -> list[tuple[str, bytes, bytes]]:
    sent: list[tuple[str, bytes, bytes]] = []

    async def sink(topic: str, key: bytes, value: bytes) -> None:
        sent.append((topic, key, value))

    detector = build_app(SETTINGS, app_id="agent-test", live_config=LiveConfig(lateness_s=0.0), sink=sink)

    async def go() -> None:
        async with detector.process.test_context() as agent:
            for line in lines:
                await agent.put(key=b"k", value=line)

    asyncio.run(go())
    return sent


def test_the_app_reads_with_its_tuning() -> None:
    async def sink(topic: str, key: bytes, value: bytes) -> None: ...

    tuning = FaustTuning(max_poll_records=7, max_fetch_bytes=4096, buffer_maxsize=64)
    conf = build_app(SETTINGS, app_id="agent-tuning", sink=sink, tuning=tuning).app.conf
    assert (conf.broker_max_poll_records, conf.consumer_max_fetch_size, conf.stream_buffer_maxsize) == (
        7, 4096, 64)


def test_on_kafka_the_app_lets_the_wall_clock_become_event_time_only_as_far_as_reads_are_complete(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Blind is not dead, for the Faust engine too: until the end offsets it asks for are reached,
    a restarted worker's backlog (or a broker away) never looks like silence."""
    asked = []
    # no admin client:
    monkeypatch.setattr("trainmedic.streams.engines.faust_app.ReadCheck", lambda *args: asked.append(args))
    detector = build_app(SETTINGS, app_id="agent-reads")  # nothing else connects until a worker runs
    assert [settings for settings, *_ in asked] == [SETTINGS]
    recorded = build_app(SETTINGS, app_id="agent-sink", sink=lambda *_: None)
    for app in (detector, recorded):
        app.live.tick(time.time())
    assert detector.live.blind_for == float("inf")  # watching, and nothing confirmed yet
    assert recorded.live.blind_for is None  # in memory: no reads to watch


def test_a_recording_put_through_the_agent_opens_its_incident() -> None:
    lines = [line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line]
    # All of it arrives through one channel here, so it comes in event-time order.
    sent = run_agent(sorted(lines, key=lambda line: json.loads(line)["ts"]))
    incidents = [s.decode(v, s.adapter("incidents")) for t, _, v in sent if t == SETTINGS.topics.incidents]
    assert [(i.category, i.severity, i.node, i.status) for i in incidents][:1] == [
        ("gpu_lost", "SEV1", "node-01", "open")]
    keys = [key for t, key, _ in sent if t == SETTINGS.topics.incidents]
    assert keys[0] == b"job-a"  # incidents are keyed by job, so a job's story stays in order


def test_malformed_values_go_to_the_dlq_and_the_agent_keeps_going() -> None:
    beat = s.encode(s.NodeHeartbeat(ts=time.time(), node="n", interval=1.0))  # stamped now, in memory
    sent = run_agent([b"{not json", beat, json.dumps({"type": "gpu_sample", "ts": 2}).encode(), beat])
    letters = [s.decode(v, s.adapter("dlq")) for t, _, v in sent if t == SETTINGS.topics.dlq]
    assert len(letters) == 2
    assert "Invalid JSON" in letters[0].reason
    assert "node: Field required" in letters[1].reason
    assert letters[1].raw_value() == b'{"type": "gpu_sample", "ts": 2}'


def test_the_agent_keeps_the_offsets_its_state_reflects() -> None:
    detector = build_app(SETTINGS, app_id="agent-offsets", live_config=LiveConfig(lateness_s=10.0),
                         sink=_discard)
    beat = s.encode(s.NodeHeartbeat(ts=time.time(), node="n", interval=1.0))  # test_context stamps now

    async def go() -> None:
        async with detector.process.test_context() as agent:
            for _ in range(3):
                await agent.put(key=b"n", value=beat, partition=2)

    asyncio.run(go())
    [(where, offset)] = detector.offsets.items()
    assert where[1] == 2 and offset == 3  # the next to read
    [held] = [h for h in detector.live.held() if h.origin.offset == 2]
    assert (held.origin.partition, held.origin.key, held.origin.value) == (2, b"n", beat)


async def _discard(topic: str, key: bytes, value: bytes) -> None:
    return None


class Checkpoints:
    """The checkpoint topic, in memory."""

    topic, app_id = "cp-test-checkpoints", "cp-test"
    owner = Owner(SETTINGS.topic_prefix, (SETTINGS.topics.gpu, SETTINGS.topics.node, SETTINGS.topics.worker))

    def __init__(self, last=None) -> None:
        self.last, self.written = last, []

    def read_last(self):
        return self.last

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def poll(self) -> None:
        pass


class Consumer:
    def __init__(self, assignment) -> None:
        self._assignment, self.committed, self.paused = assignment, [], set()

    def assignment(self):
        return self._assignment

    def pause_partitions(self, tps) -> None:
        self.paused |= set(tps)

    async def _commit(self, offsets) -> bool:
        self.committed.append(dict(offsets))
        return True


def faust_checkpoints(last=None, assignment=(), counts=None) -> FaustCheckpoints:
    """By default the telemetry partitions assigned are all there are."""
    if counts is None:
        counts = {topic: 0 for topic in (SETTINGS.topics.gpu, SETTINGS.topics.node, SETTINGS.topics.worker)}
        for tp in assignment:
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
    app = SimpleNamespace(consumer=Consumer(set(assignment)))
    saving = FaustCheckpoints(app, SETTINGS, "cp-test", LiveDetector(Detector(), LiveConfig()), {})
    saving.topic = Checkpoints(last)
    saving.partition_counts = lambda: counts
    return saving


def test_the_first_rebalance_restores_the_checkpoint_and_commits_its_offsets() -> None:
    topics = SETTINGS.topics
    live = LiveDetector(Detector(), LiveConfig(lateness_s=10.0))
    beat = s.NodeHeartbeat(ts=5.0, node="n", interval=1.0)
    live.feed(beat, (topics.node, 0), 5.0, RawMessage(topics.node, 0, 6, 1, b"n", s.encode(beat)))
    saved = decode_checkpoint(encode_checkpoint(live, {(topics.node, 0): 7}, 5.0))
    assigned = [TP(topics.node, 0), TP(topics.node, 1), TP("elsewhere", 0)]
    restoring = faust_checkpoints(saved, assigned)
    asyncio.run(restoring.on_rebalance_complete())
    assert restoring.restored and [h.origin for h in restoring.live.held()] == [h.origin for h in live.held()]
    # a telemetry partition the checkpoint does not know is read from its start; other topics are Faust's
    assert restoring.app.consumer.committed == [{TP(topics.node, 0): 7, TP(topics.node, 1): 0}]
    assert restoring.offsets == {(topics.node, 0): 7, (topics.node, 1): 0}  # what complete reads reach
    restoring.offsets[(topics.node, 0)] = 9
    asyncio.run(restoring.on_rebalance_complete())  # a later rebalance: where the live state is
    assert restoring.app.consumer.committed[-1] == {TP(topics.node, 0): 9, TP(topics.node, 1): 0}


def test_with_no_checkpoint_faust_s_own_offsets_apply() -> None:
    fresh = faust_checkpoints(None, [TP(SETTINGS.topics.node, 0)])
    asyncio.run(fresh.on_rebalance_complete())
    assert fresh.restored and fresh.app.consumer.committed == []


def test_a_worker_that_reads_only_some_partitions_decides_nothing_until_it_reads_them_all(
        caplog: pytest.LogCaptureFixture) -> None:
    """A second worker with the same app id (a second replica, a rolling update) takes some of the
    partitions. This one, started afresh, must not read its own and move event time on with their
    nodes: it would decide a job's failure without the node fault on a partition the other reads. It
    pauses them and says why until it is given every partition; should anything still come (Faust
    resumes a partition whose stream buffer drains), it is held. A rebalance gives them back (Faust
    resumes every partition then, and seeks to the offsets committed)."""
    topics = SETTINGS.topics
    counts = {topics.gpu: 2, topics.node: 2, topics.worker: 2}
    mine = [TP(topics.gpu, 0), TP(topics.node, 0), TP(topics.worker, 0)]
    worker = faust_checkpoints(None, mine, counts)
    asyncio.run(worker.on_rebalance_complete())
    asyncio.run(worker.standby())  # at its tick
    assert worker.whole is False and "given 3 of the 6 telemetry partitions" in caplog.text
    assert worker.app.consumer.paused == set(mine)
    every_read = SimpleNamespace(poll=lambda offsets, wall: wall)  # a ReadCheck that confirms all
    assert worker.reads_complete(every_read, time.time()) is None  # it confirms nothing
    live, now = worker.live, time.time()
    live.watch_reads()  # as the app on Kafka does: the tick confirms reads only for a whole worker
    for t in range(30):  # 30 s of node a's heartbeats, on a partition it was given
        live.feed(s.NodeHeartbeat(ts=now + t, node="a", interval=1.0), (topics.node, 0), now + t)
    assert (live.watermark, live.buffered) == (float("-inf"), 30)

    worker.app.consumer._assignment |= {TP(topic, 1) for topic in counts}  # the other worker left
    worker.app.consumer.paused.clear()  # Faust revokes, assigns and resumes every partition
    asyncio.run(worker.on_rebalance_complete())
    asyncio.run(worker.standby())
    assert worker.whole and "every telemetry partition again" in caplog.text
    assert not worker.app.consumer.paused
    for t in range(30, 36):
        live.tick(now + t)
    live.caught_up(worker.reads_complete(every_read, now + 35))
    live.feed(s.NodeHeartbeat(ts=now + 36, node="b", interval=1.0), (topics.node, 1), now + 36)
    # the partitions that deliver nothing are quiet once reads are confirmed: node a's are decided
    assert (live.buffered, live.watermark) == (1, now + 36 - 0.5)


def test_a_worker_that_cannot_count_the_partitions_decides_nothing_until_it_can(
        caplog: pytest.LogCaptureFixture) -> None:
    """No broker answer when the partitions are counted after a rebalance: whether it reads them all
    is unknown, and it confirms no reads (as if whole, a second worker started afresh decided on half
    the cluster) until a later count, which the tick asks for, says it does. It is not paused: a pause
    drops what was fetched, and resumed without a rebalance's seek that would be lost."""
    topics = SETTINGS.topics
    mine = [TP(topics.gpu, 0), TP(topics.node, 0), TP(topics.worker, 0)]
    worker = faust_checkpoints(None, mine)

    def no_broker() -> dict:
        raise KafkaError("no Kafka broker answered")

    counts, worker.partition_counts = worker.partition_counts, no_broker
    asyncio.run(worker.on_rebalance_complete())
    asyncio.run(worker.standby())  # at its tick: no broker answer yet
    every_read = SimpleNamespace(poll=lambda offsets, wall: wall)
    assert worker.whole is None and worker.reads_complete(every_read, 1.0) is None
    assert "not counted" in caplog.text and not worker.app.consumer.paused
    worker.partition_counts = counts
    asyncio.run(worker.standby())  # a later tick
    assert worker.whole and worker.reads_complete(every_read, 2.0) == 2.0


def test_a_checkpoint_waits_for_the_sends_before_it() -> None:
    saving = faust_checkpoints()
    saving.live.feed(s.NodeHeartbeat(ts=5.0, node="n", interval=1.0), ("node", 0), 5.0)

    async def go() -> None:
        turn = asyncio.Lock()
        delivery = asyncio.get_running_loop().create_future()
        saving.sent(delivery)
        with patch("trainmedic.streams.checkpoints.faust_engine.FLUSH_WAIT_S", 0.01):
            await saving.maybe_save(100.0, turn)
        assert saving.topic.written == [] and saving.pending == [delivery]  # postponed
        delivery.set_result(None)
        await saving.maybe_save(100.0 + saving.cadence.every_s, turn)
        assert len(saving.topic.written) == 1 and saving.pending == []
        failed = asyncio.get_running_loop().create_future()
        failed.set_exception(RuntimeError("delivery failed"))
        saving.sent(failed)
        saving.live.feed(s.NodeHeartbeat(ts=10.0, node="n", interval=1.0), ("node", 0), 5.1)
        saving.live.tick(5.2)  # event time moves on with the data: due again
        with pytest.raises(RuntimeError, match="delivery failed"):
            await saving.maybe_save(200.0, turn)
        assert len(saving.topic.written) == 1

    asyncio.run(go())
