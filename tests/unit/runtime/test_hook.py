"""The training hook: identity from the environment, exception capture, and never blocking a step."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pytest

from trainmedic.common.drops import DropLedger
from trainmedic.common.errors import ConfigError
from trainmedic.runtime.hook import Hook, HookConfig, WorkerIdentity
from trainmedic.schemas import WorkerFailed, WorkerStarted, WorkerStepped, adapter, encode

ENV = {"TRAINMEDIC_JOB": "llama-70b", "RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
       "TRAINMEDIC_NODE": "n02", "TRAINMEDIC_GENERATION": "3"}
IDENTITY = WorkerIdentity(job="llama-70b", rank=5, world_size=16, node="n02", generation=3, local_rank=1)


class ListSink:
    """Keeps what it is sent; `gate`, while clear, holds the sender thread inside `send`."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.ledger = DropLedger()
        self.gate = threading.Event()
        self.gate.set()
        self.flushed = False

    @property
    def dropped(self) -> int:
        return self.ledger.total

    def send(self, event: Any) -> bool:
        self.gate.wait()
        self.events.append(event)
        return True

    def poll(self) -> None:
        pass

    def flush(self, timeout_s: float) -> None:
        self.flushed = True

    def count_dropped(self, count: int, why: str) -> None:
        self.ledger.drop(count)


def hook(sink: ListSink, **config: Any) -> Hook:
    return Hook(IDENTITY, sink, config=HookConfig(**config), clock=lambda: 1000.0)


def test_identity_comes_from_the_launcher_environment() -> None:
    assert WorkerIdentity.from_env(ENV) == IDENTITY


def test_identity_defaults_suit_a_single_process() -> None:
    identity = WorkerIdentity.from_env({"TRAINMEDIC_JOB": "j"})
    assert identity is not None
    assert (identity.rank, identity.world_size, identity.generation, identity.local_rank) == (0, 1, 0, None)
    assert identity.node  # the host name


def test_under_torchrun_the_restart_count_is_the_generation() -> None:
    env = {"TRAINMEDIC_JOB": "j", "TORCHELASTIC_RESTART_COUNT": "2"}
    assert WorkerIdentity.from_env(env).generation == 2
    assert WorkerIdentity.from_env({**env, "TRAINMEDIC_GENERATION": "5"}).generation == 5


@pytest.mark.parametrize(("change", "says"), [
    ({"RANK": "five"}, "RANK='five' is not an integer"),
    ({"RANK": "16"}, "RANK 16 is not in 0..WORLD_SIZE-1 (16)"),
    ({"TRAINMEDIC_GENERATION": "-1"}, "TRAINMEDIC_GENERATION must be >= 0"),
    ({"TRAINMEDIC_HANG_FLOOR_S": "soon"}, "TRAINMEDIC_HANG_FLOOR_S: 'soon' is not a duration"),
    ({"TRAINMEDIC_HANG_FLOOR_S": "0"}, "TRAINMEDIC_HANG_FLOOR_S='0' must be a finite number of seconds"),
])
def test_a_bad_environment_is_a_clear_error(change: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        WorkerIdentity.from_env({**ENV, **change})


def test_without_a_job_the_hook_does_nothing_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trainmedic.runtime.hook"):
        noop = Hook.from_env({"RANK": "0"})
    assert "TRAINMEDIC_JOB is not set" in caplog.text
    assert not noop.enabled
    noop.started()
    noop.step(1, 0.05)
    with pytest.raises(ValueError), noop.capture():
        raise ValueError("still raised")
    noop.close()
    assert (noop.dropped, noop.queued) == (0, 0)


def test_a_restore_warning_rides_on_its_step() -> None:
    sink = ListSink()
    h = hook(sink)
    h.step(7, 0.05, restore_warning="no replica snapshot of rank 4 on n3")
    h.step(8, 0.05)
    h.close()
    warned, plain = sink.events
    assert (warned.step, warned.restore_warning) == (7, "no replica snapshot of rank 4 on n3")
    assert plain.restore_warning is None
    assert adapter("telemetry.worker").validate_json(encode(warned)) == warned


def test_where_the_state_came_from_rides_on_the_first_step() -> None:
    sink = ListSink()
    h = hook(sink)
    h.step(7, 0.05, restored={"kind": "replica", "step": 6, "seconds": 0.25, "read": 10, "received": 5})
    h.close()
    [first] = sink.events
    assert (first.restored.kind, first.restored.step, first.restored.received) == ("replica", 6, 5)
    assert adapter("telemetry.worker").validate_json(encode(first)) == first


def test_start_steps_and_an_error_become_contract_events() -> None:
    sink = ListSink()
    h = hook(sink)
    h.started()
    h.step(0, 0.051)
    h.step(1, 0.049)
    with pytest.raises(RuntimeError, match="CUDA error: an illegal memory access"), h.capture():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    h.close()
    assert [type(e) for e in sink.events] == [WorkerStarted, WorkerStepped, WorkerStepped, WorkerFailed]
    assert sink.flushed
    for event in sink.events:
        assert adapter("telemetry.worker").validate_json(encode(event)) == event
        dumped = event.model_dump()
        fields = ("job", "rank", "world_size", "node", "generation", "pid", "local_rank")
        assert {k: dumped[k] for k in fields} == {
            "job": "llama-70b", "rank": 5, "world_size": 16, "node": "n02", "generation": 3,
            "pid": os.getpid(), "local_rank": 1,
        }
        assert event.ts == 1000.0
    assert (sink.events[2].step, sink.events[2].step_time) == (1, 0.049)
    assert sink.events[3].error == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_capture_works_as_a_decorator_and_reports_an_exception_once() -> None:
    sink = ListSink()
    h = hook(sink)

    @h.capture()
    def train_step() -> None:
        with h.capture():
            raise KeyError("missing shard")

    with pytest.raises(KeyError):
        train_step()
    h.close()
    assert [e.error for e in sink.events] == ["KeyError: 'missing shard'"]


def test_an_operator_interrupt_is_not_a_worker_error() -> None:
    sink = ListSink()
    h = hook(sink)
    with pytest.raises(KeyboardInterrupt), h.capture():
        raise KeyboardInterrupt
    h.close()
    assert sink.events == []


def test_a_step_never_waits_for_a_stuck_sender_drops_are_counted_and_the_queue_stays_bounded() -> None:
    sink = ListSink()
    sink.gate.clear()  # the sender thread will hang inside its first send
    h = hook(sink, queue_size=10, batch_size=1)
    done = threading.Event()

    def training() -> None:
        for step in range(1000):
            h.step(step, 0.05)
        done.set()

    threading.Thread(target=training, daemon=True).start()
    assert done.wait(60), "hook.step blocked while the sender was stuck"
    assert h.queued <= 10
    assert 989 <= h.dropped <= 990  # all but the queue and the one event the sender holds
    sink.gate.set()
    h.close()
    assert len(sink.events) + h.dropped == 1000


def test_a_close_past_its_deadline_counts_what_is_still_queued() -> None:
    sink = ListSink()
    sink.gate.clear()  # the sender is stuck in its first send when close begins
    h = hook(sink, queue_size=10, batch_size=1)
    for step in range(5):
        h.step(step, 0.05)
    threading.Timer(0.3, sink.gate.set).start()  # it comes back only after the deadline
    h.close(timeout_s=0.1)
    assert h.queued == 0
    assert len(sink.events) + h.dropped == 5  # nothing went uncounted
    assert h.dropped >= 4  # everything but the event in the sender's hand


def test_an_invalid_value_is_dropped_and_counted_not_raised_in_the_step() -> None:
    sink = ListSink()
    h = hook(sink)
    h.step(-1, 0.05)
    h.step(2, 0.05)
    h.close()
    assert [e.step for e in sink.events] == [2] and h.dropped == 1


def test_events_after_close_are_counted_as_dropped() -> None:
    sink = ListSink()
    h = hook(sink)
    h.step(0, 0.05)
    h.close()
    h.step(1, 0.05)
    assert len(sink.events) == 1 and h.dropped == 1


def test_worker_start_carries_the_jobs_hang_floor_from_the_environment() -> None:
    identity = WorkerIdentity.from_env({**ENV, "TRAINMEDIC_HANG_FLOOR_S": "90.0"})
    assert identity.hang_floor_s == 90.0 and WorkerIdentity.from_env(ENV).hang_floor_s is None
    sink = ListSink()
    h = Hook(identity, sink)
    h.started()
    h.close()
    (started,) = sink.events
    assert isinstance(started, WorkerStarted) and started.hang_floor_s == 90.0


def test_with_no_executor_listening_steps_never_wait_memory_stays_bounded_and_every_loss_is_counted(
        tmp_path) -> None:
    env = {"TRAINMEDIC_JOB": "gpt-j", "TRAINMEDIC_REPORT_SOCKET": str(tmp_path / "nobody.sock")}
    hook = Hook.from_env(env, config=HookConfig(queue_size=100, flush_timeout_s=0.2))
    assert hook.enabled
    for step in range(20_000):
        hook.step(step, 0.05)
    assert hook.queued <= 100
    hook.close()
    assert hook.dropped == 20_000  # nothing was written, and nothing went uncounted


def test_without_the_executors_socket_the_hook_does_nothing_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trainmedic.runtime.hook"):
        noop = Hook.from_env({"TRAINMEDIC_JOB": "gpt-j", "TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:9092"})
    assert "TRAINMEDIC_REPORT_SOCKET is not set" in caplog.text and not noop.enabled
