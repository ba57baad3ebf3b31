"""The in-band training hook: what a training loop imports to report its rank's start, steps and
errors to its executor, never blocking a step (docs/producers.md, "The training hook", has the API).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import queue
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import env_seconds
from trainmedic.runtime.report_channel import SOCKET_ENV, ReportChannel

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 4096  # keeps one worker_error a small message, whatever the exception says


@dataclass(frozen=True)
class WorkerIdentity:
    """Who is reporting: one rank of one job, at one restart generation."""

    job: str
    rank: int
    world_size: int
    node: str
    generation: int = 0
    local_rank: int | None = None
    hang_floor_s: float | None = None  # the job's failure.hang_floor_s, reported in worker_start

    def __post_init__(self) -> None:
        if not self.job or not self.node:
            raise ConfigError("the job and node names must not be empty")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"RANK {self.rank} is not in 0..WORLD_SIZE-1 ({self.world_size})")
        if self.generation < 0:
            raise ConfigError("TRAINMEDIC_GENERATION must be >= 0")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> WorkerIdentity | None:
        """The identity the launcher put in the environment; None when TRAINMEDIC_JOB is unset."""
        job = env.get("TRAINMEDIC_JOB", "")
        if not job:
            return None
        local = env.get("LOCAL_RANK")
        return cls(
            job=job, rank=_int(env, "RANK", "0"), world_size=_int(env, "WORLD_SIZE", "1"),
            node=env.get("TRAINMEDIC_NODE") or socket.gethostname(),
            # Under torchrun, which knows no trainmedic generation, its restart count stands in.
            generation=_int(env, "TRAINMEDIC_GENERATION", env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            local_rank=None if local is None else _int(env, "LOCAL_RANK", local),
            hang_floor_s=env_seconds(env, "TRAINMEDIC_HANG_FLOOR_S"),
        )


@dataclass(frozen=True)
class HookConfig:
    """The hook's bounds: events waiting in its queue, a batch the sender takes; the exit flush."""

    queue_size: int = 10_000
    batch_size: int = 500
    linger_s: float = 0.05  # the sender's longest wait for a first event
    flush_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if min(self.queue_size, self.batch_size) < 1:
            raise ConfigError("the hook's queue and batch sizes must be at least 1")
        for name in ("linger_s", "flush_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number of seconds >= 0")


class Sink(Protocol):
    """Where the sender thread puts events: `report_channel.ReportChannel` to the executor."""

    @property
    def dropped(self) -> int: ...

    def send(self, event: Any) -> bool: ...

    def poll(self) -> None: ...

    def flush(self, timeout_s: float) -> None: ...

    def count_dropped(self, count: int, why: str) -> None: ...


# What the training thread enqueues: (event type, ts, step or error text, step_time, the optional
# fields: a step's restore_warning and restored, an error's traceback).
_Item = tuple[str, float, Any, float, dict[str, Any] | None, int]  # ..., the generation it is about


class Hook:
    """Reports one rank's life on telemetry.worker without ever blocking the training step."""

    def __init__(
        self, identity: WorkerIdentity | None, sink: Sink | None, *,
        config: HookConfig = HookConfig(), clock: Callable[[], float] = time.time,
    ) -> None:
        self.identity = identity
        self.config = config
        self._sink = sink
        self._clock = clock
        self._queue: queue.Queue[_Item] = queue.Queue(config.queue_size)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closing = threading.Event()
        self._last_error: BaseException | None = None
        self._common: dict[str, Any] = {}
        if identity is not None:
            self._common = {
                "node": identity.node, "job": identity.job, "rank": identity.rank,
                "world_size": identity.world_size, "generation": identity.generation, "pid": os.getpid(),
            }
            if identity.local_rank is not None:
                self._common["local_rank"] = identity.local_rank

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] = os.environ, *, config: HookConfig = HookConfig(),
    ) -> Hook:
        """A hook for the rank the environment describes, reporting to the executor's socket; a no-op
        hook when TRAINMEDIC_JOB or the socket (TRAINMEDIC_REPORT_SOCKET) is unset."""
        identity = WorkerIdentity.from_env(env)
        if identity is None:
            log.info("trainmedic hook: TRAINMEDIC_JOB is not set, so this rank reports nothing")
            return cls(None, None, config=config)
        path = env.get(SOCKET_ENV, "")
        if not path:
            log.info("trainmedic hook: %s is not set (no trainmedic executor launched this rank), so it "
                     "reports nothing", SOCKET_ENV)
            return cls(None, None, config=config)
        return cls(identity, ReportChannel(path, what=f"hook of rank {identity.rank}"), config=config)

    @property
    def enabled(self) -> bool:
        return self.identity is not None and self._sink is not None

    @property
    def dropped(self) -> int:
        """Events lost so far: refused by a full queue, or never written to the executor."""
        return 0 if self._sink is None else self._sink.dropped

    @property
    def queued(self) -> int:
        """Events waiting in the hook's own queue (at most `config.queue_size`)."""
        return self._queue.qsize()

    def started(self) -> None:
        """The rank has joined its process group (worker_start)."""
        self._put(("worker_start", self._clock(), None, 0.0, None))

    def step(self, step: int, step_time: float, restore_warning: str | None = None,
             restored: dict[str, Any] | None = None) -> None:
        """Step `step` finished and took `step_time` seconds (worker_step). Never blocks.
        `restore_warning`: the restore before this step fell back from its replica; `restored`:
        where the state came from, the fields of `schemas.Restored` (see the schema)."""
        extra = {key: value for key, value in (("restore_warning", restore_warning), ("restored", restored))
                 if value is not None}
        self._put(("worker_step", self._clock(), step, step_time, extra or None))

    def waiting(self) -> None:
        """A peer's failure broke this rank's process group and it waits, alive, for the next
        generation (`Runtime.run`): its executor may keep the process instead of starting a new one."""
        self._put(("worker_waiting", self._clock(), None, 0.0, None))

    def regenerate(self, generation: int) -> None:
        """The rank re-formed its process group at `generation`: what it reports from now on is
        about that generation (what was queued before keeps the one it was about)."""
        if self._common:
            self._common["generation"] = generation

    def error(self, exc: BaseException) -> None:
        """Report an exception that escaped the training step (worker_error), once per exception."""
        if exc is self._last_error:
            return
        self._last_error = exc
        text = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        formatted = "".join(traceback.format_exception(exc))  # bounded by the sender (`_event`)
        self._put(("worker_error", self._clock(), text, 0.0, {"traceback": formatted}))

    def capture(self) -> _Capture:
        """A context manager and decorator: an Exception escaping it is reported, then re-raised."""
        return _Capture(self)

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued within `timeout_s` (default: config.flush_timeout_s), then stop."""
        sink = self._sink
        if sink is None or self._closing.is_set():
            return
        self._closing.set()
        timeout_s = self.config.flush_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        if self._thread is not None:
            self._thread.join(timeout_s)
            atexit.unregister(self.close)
            if self._thread.is_alive():
                # Past the deadline: what is still queued is lost, and counted. The batch in the
                # sender's hand goes to the sink without waiting, so the sender ends promptly.
                left = self._discard_queued()
                log.warning("trainmedic hook: the sender did not finish within %.1fs; %d events dropped",
                            timeout_s, left)
                self._thread.join(1.0)
        sink.flush(max(0.0, deadline - time.monotonic()))

    def _discard_queued(self) -> int:
        left = 0
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
                left += 1
        if left:
            self._sink.count_dropped(left, "the hook closed before they were sent")
        return left

    def __enter__(self) -> Hook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, what: tuple[str, float, Any, float, dict[str, Any] | None]) -> None:
        item = (*what, self._common.get("generation", 0))
        sink = self._sink
        if sink is None:
            return
        if self._closing.is_set():
            sink.count_dropped(1, "the hook is closed")
            return
        if self._thread is None:
            self._start(sink)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            sink.count_dropped(1, f"the hook's queue of {self.config.queue_size} events is full")

    def _start(self, sink: Sink) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._send_forever, args=(sink,), name="trainmedic-hook",
                                          daemon=True)
                thread.start()
                atexit.register(self.close)
                self._thread = thread

    def _send_forever(self, sink: Sink) -> None:
        """The sender thread: batches from the queue into the sink until closed and drained."""
        while True:
            batch = self._take_batch()
            for item in batch:
                event = self._event(item, sink)
                if event is not None:
                    sink.send(event)
            sink.poll()
            if not batch and self._closing.is_set():
                return

    def _take_batch(self) -> list[_Item]:
        try:
            batch = [self._queue.get(timeout=self.config.linger_s)]
        except queue.Empty:
            return []
        with contextlib.suppress(queue.Empty):
            while len(batch) < self.config.batch_size:
                batch.append(self._queue.get_nowait())
        return batch

    def _event(self, item: _Item, sink: Sink) -> Any:
        from pydantic import ValidationError

        from trainmedic.schemas import WorkerFailed, WorkerStarted, WorkerStepped
        from trainmedic.schemas.telemetry import WorkerWaiting, last_lines

        kind, ts, value, step_time, extra, generation = item
        common = {**self._common, "generation": generation}
        try:
            if kind == "worker_step":
                return WorkerStepped(ts=ts, step=value, step_time=step_time, **(extra or {}), **common)
            if kind == "worker_error":
                return WorkerFailed(ts=ts, error=value, traceback=last_lines(extra["traceback"]), **common)
            if kind == "worker_waiting":
                return WorkerWaiting(ts=ts, **common)
            return WorkerStarted(ts=ts, hang_floor_s=self.identity.hang_floor_s, **common)
        except ValidationError as err:
            sink.count_dropped(1, f"invalid {kind}: {err.errors(include_url=False)[0]['msg']}")
            return None


class _Capture(contextlib.ContextDecorator):
    """`with hook.capture():` or `@hook.capture()`: reports an escaping Exception, never swallows it."""

    def __init__(self, hook: Hook) -> None:
        self._hook = hook

    def __enter__(self) -> _Capture:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> bool:
        # KeyboardInterrupt and SystemExit are the operator's or the program's choice, not a failure.
        if isinstance(exc, Exception):
            self._hook.error(exc)
        return False


def _int(env: Mapping[str, str], name: str, default: str) -> int:
    text = env.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not an integer") from None
