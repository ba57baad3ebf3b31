"""The node's health check (issue 45): on a signed `health_check` command the executor runs its probe,
bounded in time and output, and answers `done` or `failed` with a short reason; the operator's
`--health-check` command, or the built-in NVML probe (no GPU: it passes, saying so)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.executor.test_poison import NODE, record
from tests.unit.producers.fake_pynvml import FakeGpu, FakeNvml, NVMLError_GpuIsLost
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.recovery.executor.cli import EXECUTOR, OPTIONS, build_config
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.decide import Apply, Reack, Refuse, Step, decide
from trainmedic.recovery.executor.core.health import MAX_REASON_CHARS
from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.core.state import GroupState, LocalGroup
from trainmedic.recovery.executor.health_check import HealthProbe, builtin, run_command
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import Command, CommandAction, encode
from trainmedic.schemas.commands import HEALTH_CHECK_JOB

KEY = generate()
TRUSTED = TrustedKeys.of(KEY.private.public_key())
NOW = 1000.0


def check(key=KEY, **changes) -> Command:
    fields = dict(ts=NOW - 1, node=NODE, id="chk-1", job=HEALTH_CHECK_JOB, generation=0,
                  action=CommandAction.HEALTH_CHECK, incident_id="esc-1", deadline=NOW + 120)
    command = Command(**{**fields, **changes})
    return key.sign(command) if key else command


def decided(command: Command, **kwargs):
    return decide(command, received=encode(command), node=NODE, trusted=TRUSTED, now=NOW, freshness_s=60.0,
                  **{"group": None, "applied": (), **kwargs})


# --- the decision (pure) ---

def test_a_signed_health_check_runs_the_probe_whatever_runs_on_the_node() -> None:
    busy = LocalGroup("llm", 7, GroupState.RUNNING)
    assert decided(check()) == Apply((Step.HEALTH_CHECK,), "run this node's health check")
    assert decided(check(), group=busy, epoch=3) == Refuse(
        "fenced: sent by coordinator epoch None, this node follows epoch 3")
    assert isinstance(decided(check(epoch=3), epoch=3), Apply)


def test_a_forged_stale_or_answered_health_check_is_not_run() -> None:
    assert decided(check(key=generate())).unverified
    assert "stale" in decided(check(ts=NOW - 600)).reason
    answered = decided(check(), answers={"chk-1": RecordedAck("done", "no GPU seen")})
    assert isinstance(answered, Reack) and answered.answer.status == "done"


# --- the probe command ---

def test_a_passing_probe_command_passes_with_what_it_said() -> None:
    verdict = run_command(["sh", "-c", "echo checking; echo all 8 GPUs fine"], 10.0)
    assert verdict.ok and verdict.reason == "sh exited 0: checking\nall 8 GPUs fine"


def test_a_failing_probe_command_fails_with_its_exit_and_output() -> None:
    verdict = run_command(["sh", "-c", "echo 'GPU 3: row remap failed' >&2; exit 3"], 10.0)
    assert not verdict.ok and verdict.reason == "sh exited 3: GPU 3: row remap failed"


def test_a_probe_past_its_time_is_killed_with_its_children_and_fails(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    began = time.monotonic()
    verdict = run_command(["sh", "-c", f"echo started; sleep 30 & echo $! > {pid_file}; wait"], 0.5)
    assert time.monotonic() - began < 5.0
    assert not verdict.ok and verdict.reason == "sh timed out after 0.5 s (killed): started"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5.0
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)  # its whole process group


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_probe_output_is_escaped_and_bounded_and_a_missing_one_fails() -> None:
    script = "head -c 1000000 /dev/zero | tr '\\0' x; printf '\\033[2Jevil\\n'"
    verdict = run_command(["sh", "-c", script], 10.0)
    assert verdict.ok and len(verdict.reason) <= MAX_REASON_CHARS and verdict.reason.endswith("\\x1b[2Jevil")
    missing = run_command(["/no/such/probe"], 10.0)
    assert not missing.ok and missing.reason.startswith("/no/such/probe cannot run: [Errno 2]")


def test_the_probe_gets_no_trainmedic_variables(monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_KAFKA_CONFIG", '{"sasl.password": "secret"}')
    verdict = run_command(["sh", "-c", "env | grep -c TRAINMEDIC_ || true"], 10.0)
    assert verdict.reason == "sh exited 0: 0"


# --- the built-in probe ---

def test_without_nvml_or_gpus_the_builtin_probe_passes_saying_it_saw_no_gpu(tmp_path: Path) -> None:
    verdict = builtin(FakeNvml([], library=False), devices=tmp_path)
    assert verdict.ok and verdict.reason.startswith("no GPU seen (NVML did not answer")
    (tmp_path / "nvidia0").touch()  # a GPU host whose driver does not answer is not healthy
    verdict = builtin(FakeNvml([], library=False), devices=tmp_path)
    assert not verdict.ok and "this host has GPU devices (nvidia0)" in verdict.reason


class Nvml(FakeNvml):
    """The fake with the readings the probe adds: pending page retirement, remapped rows."""

    def __init__(self, gpus, *, pending=(), remap_failed=()) -> None:
        super().__init__(gpus)
        self.pending, self.remap_failed = set(pending), set(remap_failed)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        self._gpu(handle, "retired")
        return int(handle - 0x1000 in self.pending)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        self._gpu(handle, "remapped")
        return (0, 0, 0, int(handle - 0x1000 in self.remap_failed))


def gpus(count: int = 2, **changes) -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i}", **changes) for i in range(count)]


def test_the_builtin_probe_passes_healthy_gpus_and_fails_each_fault(tmp_path: Path) -> None:
    assert builtin(Nvml(gpus()), tmp_path).reason == (
        "2 GPU(s) read through NVML: no Xid, retired page or ECC error")
    assert builtin(Nvml(gpus(), pending={1}), tmp_path).reason == (
        "GPU 1: page retirement pending (needs a reset)")
    assert builtin(Nvml(gpus(), remap_failed={0}), tmp_path).reason == "GPU 0: row remapping failed"
    assert not builtin(Nvml(gpus(ecc={0: 5, 1: 2})), tmp_path).ok
    queued = Nvml(gpus())
    queued.xid(1, 79)
    assert builtin(queued, tmp_path).reason == "GPU 1: Xid 79"
    lost = Nvml([FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", lost=True)])
    verdict = builtin(lost, tmp_path)
    assert not verdict.ok and verdict.reason == f"GPU 1: cannot be opened or read ({NVMLError_GpuIsLost()})"
    assert "shutdown" in lost.calls


def test_an_nvml_that_hangs_fails_the_check_in_time(tmp_path: Path) -> None:
    class Hung(Nvml):
        def nvmlDeviceGetCount(self) -> int:
            time.sleep(5)
            return 0

    began = time.monotonic()
    verdict = HealthProbe(nvml=Hung([]), devices=tmp_path).run(0.3)
    assert not verdict.ok and verdict.reason == "NVML did not answer within 0.3 s"
    assert time.monotonic() - began < 2.0


# --- the flag, and the executor answering ---

def test_health_check_is_a_flag_a_variable_and_a_key_and_a_bad_one_is_refused(monkeypatch) -> None:
    parser = argparse.ArgumentParser()
    OPTIONS.add_to(parser)
    args = parser.parse_args(["--node", "n1", "--insecure", "--ranks-as-root",
                              "--health-check", "dcgmi diag -r 1", "--health-check-timeout-s", "90"])
    config = build_config(OPTIONS, EXECUTOR, args)
    assert (config.health_check, config.health_check_timeout_s) == ("dcgmi diag -r 1", 90.0)
    monkeypatch.setenv("TRAINMEDIC_EXECUTOR_HEALTH_CHECK", "'unbalanced")
    with pytest.raises(ConfigError, match="health_check"):
        build_config(OPTIONS, EXECUTOR, parser.parse_args(["--node", "n1", "--insecure", "--ranks-as-root"]))


def test_trainmedic_node_takes_the_health_check_flag() -> None:
    from trainmedic import node

    parser = argparse.ArgumentParser()
    node.add_arguments(parser)
    args = parser.parse_args(["--node", "n1", "--health-check", "/usr/local/bin/probe --quick"])
    assert args.TRAINMEDIC_EXECUTOR_HEALTH_CHECK == "/usr/local/bin/probe --quick"


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[tuple[Executor, list]]:
    kafka = KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1",
                                    "TRAINMEDIC_KAFKA_CONFIG": json.dumps({"message.timeout.ms": 100})})
    config = ExecutorConfig(node=NODE, state_dir=tmp_path, insecure=True, warm_start=False,
                            health_check="sh -c 'echo run >> ${PROBE_RUNS:-/dev/null}; echo probing; "
                                         "exit ${PROBE_EXIT:-0}'",
                            health_check_timeout_s=5)
    ex = Executor(config, kafka)
    ex.applier.ledger = Ledger.open(config.ledger_path("t."))
    acks: list = []
    ex.applier._send_ack = lambda cid, job, gen, status, **kw: acks.append((cid, job, gen, str(status),
                                                                            kw.get("reason")))
    yield ex, acks
    ex.applier.ledger.close()


def answered(ex: Executor, acks: list, count: int) -> list:
    deadline = time.monotonic() + 10.0
    while len(acks) < count and time.monotonic() < deadline:
        ex.applier.finish_checks()
        time.sleep(0.02)
    return acks


@pytest.mark.parametrize(("exit_code", "status"), [("0", "done"), ("4", "failed")])
def test_the_executor_accepts_a_check_runs_it_aside_and_answers_once(executor, monkeypatch, tmp_path,
                                                                       exit_code, status) -> None:
    ex, acks = executor
    runs = tmp_path / "runs"
    monkeypatch.setenv("PROBE_EXIT", exit_code)
    monkeypatch.setenv("PROBE_RUNS", str(runs))
    command = check(key=None, ts=time.time(), deadline=time.time() + 60)
    ex._handle(record(command, offset=0))
    ex._handle(record(replace_ts(command), offset=1))  # a re-send while it runs: not run twice
    said = f"sh exited {exit_code}: probing"
    assert answered(ex, acks, 2) == [("chk-1", HEALTH_CHECK_JOB, 0, "accepted", None),
                                     ("chk-1", HEALTH_CHECK_JOB, 0, status, said)]
    ledger = ex.applier.ledger.state
    assert ledger.positions[("t.commands", 0)] == 2 and ledger.applied == set() and ledger.generations == {}
    ex._handle(record(replace_ts(command), offset=2))  # a re-send after it: its answer again, not a new run
    assert acks[-1][3] == status and len(acks) == 3
    assert runs.read_text() == "run\n"  # the probe ran once, for the first send alone


def test_a_probe_that_raises_fails_the_check_and_leaves_nothing_running(executor, monkeypatch) -> None:
    """An exception nobody foresaw ended the probe's thread: the check stayed "running already" for
    every re-send, unanswered until the coordinator's deadline."""
    ex, acks = executor

    def broken(timeout_s: float):
        raise KeyError("no such reading")

    monkeypatch.setattr(ex.applier._probe, "run", broken)
    command = check(key=None, ts=time.time(), deadline=time.time() + 60)
    ex._handle(record(command, offset=0))
    assert answered(ex, acks, 2)[1][3:] == ("failed", "the health check failed: KeyError: 'no such reading'")
    assert ex.applier._checking == set()


def replace_ts(command: Command) -> Command:
    return command.model_copy(update={"ts": time.time()})
