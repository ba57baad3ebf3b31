"""The rank side of trainmedic: join the process group, restore, snapshot, checkpoint, retry in place
(docs/executor.md, "The worker runtime", "Reattempt"; docs/adopting.md).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from trainmedic.runtime import rank_state, reform, sharded, state_files
from trainmedic.runtime.env import DEFAULT_TIMEOUT_S, WorkerEnv
from trainmedic.runtime.hook import Hook
from trainmedic.runtime.job_store import JobStore
from trainmedic.runtime.rank_state import Stateful  # what the runtime saves: an optimizer, a data loader
from trainmedic.runtime.rendezvous import generation_store, join_store
from trainmedic.runtime.restore import Offer, fallback_warning, restore_state
from trainmedic.runtime.snapshot_writer import SnapshotWriter
from trainmedic.schemas import RestoreSource

log = logging.getLogger(__name__)
T = TypeVar("T")



@dataclass
class Runtime:
    """One rank's connection to its job: where it is, how it saves, how it reports."""

    env: WorkerEnv
    hook: Hook | None = None  # the in-band hook that reports steps and errors (None: report nothing)
    snapshot_every: int = 1
    checkpoint_every: int = 0
    snapshot_async: bool = False  # sharded snapshots written behind the next step (see SnapshotWriter)
    device: torch.device | None = None
    restored_from: Offer | None = None
    restore_warning: str | None = None  # set by a restore that fell back from the named replica
    restored: dict[str, Any] | None = None  # where the state came from (`schemas.Restored`'s fields)
    own_state: str | None = None  # what the restore did with this rank's RNG and data position, in words
    _report_due: bool = field(default=False, repr=False)  # the next step carries the two above
    _reattempt: bool = field(default=False, repr=False)
    _stop_held: bool = field(default=False, repr=False)
    _at_step: int = field(default=0, repr=False)  # the completed steps the state holds (restored or saved)
    _restored_generation: int = field(default=state_files.UNNAMED, repr=False)  # that saved what was restored
    _resumed: bool = field(default=False, repr=False)  # restored another submission's state: snapshot next
    _data_checked: bool = field(default=False, repr=False)  # the data state proved loadable once
    _writer: SnapshotWriter = field(default_factory=SnapshotWriter, repr=False)
    _store: dist.Store | None = field(default=None, repr=False)  # this generation's rendezvous store
    _backend: str = field(default="gloo", repr=False)
    _timeout_s: float = field(default=DEFAULT_TIMEOUT_S, repr=False)

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def saves_as(self) -> int:
        """The generation this rank's snapshots and checkpoints are saved under: the job's. A rank no
        trainmedic executor started (torchrun: no submission, its checkpoint dir shared by every run)
        saves one above the restored state's when that is higher, or a run over an earlier run's
        checkpoints would save below them and prune its own as soon as written."""
        if self.env.submission is not None:
            return self.env.generation
        return max(self.env.generation, self._restored_generation + 1)

    def restore(self, model: torch.nn.Module, optimizer: Stateful, data: Stateful | None = None) -> int:
        """Load the state the restore source names into every rank; returns the step to resume at.
        A sharded model (FSDP2 / HSDP) is restored per shard, resharded to this mesh (`sharded`).
        From snapshots onto the same world size, each rank also takes back its own RNG streams and
        `data`'s position (a data loader or sampler with `state_dict`), as `rank_state` says.

        A collective: every rank calls it, once, right after `init_from_env`.
        """
        began = time.monotonic()
        self.restored = self.own_state = None
        own: dict[str, Any] | None = None
        if sharded.is_sharded(model):
            done = sharded.restore(self.env, model, optimizer, self.device)
            step, source, what = 0, None, "fresh"
            if done is not None:
                step, source = done.step, Offer(self.rank, done.step, done.kind, done.path, done.generation,
                                                resumed=done.resumed)
                self.restored, what, own = done.report(), done.describe(), done.own
        else:
            step, source = restore_state(self.env, model, optimizer, self.device)
            what = "fresh" if source is None else f"{source.kind} from rank {source.rank}: {source.path}"
            if source is not None:
                self.restored = {"kind": source.kind, "step": step,
                                 "seconds": round(time.monotonic() - began, 3)}
                if source.kind == "replica" and self.env.snapshot_dir:
                    prefix = state_files.snapshot_prefix(self.rank)
                    own = rank_state.read(state_files.state_path(Path(self.env.snapshot_dir), prefix,
                                                                 source.generation, step))
        if source is not None:
            missing = rank_state.MISSING if source.kind == "replica" else "a checkpoint holds neither"
            taken, self.own_state = rank_state.apply(own, self.world_size, data, self.device, missing)
            what = f"{what}; {self.own_state}"
            self._warn_if_some_ranks_resumed_their_streams(taken)
        self.restored_from = source
        self._restored_generation = state_files.UNNAMED if source is None else source.generation
        self._resumed = source is not None and source.resumed
        self.restore_warning = fallback_warning(self.env.restore, source)
        self._report_due = self.restore_warning is not None or self.restored is not None
        if self.restore_warning:
            log.warning("rank %d g%d: RESTORE FELL BACK: %s", self.rank, self.env.generation,
                        self.restore_warning)
        log.info("rank %d g%d: resuming at step %d (%s)", self.rank, self.env.generation, step, what)
        self._at_step = step
        return step

    def _warn_if_some_ranks_resumed_their_streams(self, taken: bool) -> None:
        """A collective: loud when some ranks took back their RNG and data position and others
        could not (a replaced node's ranks have no snapshot of their own): those start their
        streams afresh, and may see data again, while the rest resume."""
        count = torch.tensor([int(taken)], device=self.device)
        dist.all_reduce(count)
        if 0 < count.item() < self.world_size:
            log.warning("rank %d g%d: %d of %d ranks took back their RNG and data position; the others "
                        "start afresh (this rank: %s)", self.rank, self.env.generation, count.item(),
                        self.world_size, self.own_state)

    def maybe_checkpoint(self, step: int, model: torch.nn.Module, optimizer: Stateful,
                         data: Stateful | None = None) -> None:
        """After `step` completed steps: a local snapshot every `snapshot_every` steps (every rank;
        with this rank's RNG streams and `data`'s position), a checkpoint every `checkpoint_every`
        steps into TRAINMEDIC_CHECKPOINT_DIR (rank 0; every rank its shards for a sharded model,
        with DCP)."""
        env = self.env
        self._at_step = step
        # The first step after a resume is snapshot whatever snapshot_every says: the submission's own
        # state, so that a later generation (maybe at a world size a resume is refused onto) need not
        # resume again.
        periodic = self.snapshot_every and step % self.snapshot_every == 0
        snapshot_due = env.snapshot_dir and (periodic or self._resumed)
        self._resumed = False
        checkpoint_due = env.checkpoint_dir and self.checkpoint_every and step % self.checkpoint_every == 0
        if sharded.is_sharded(model):
            if snapshot_due or checkpoint_due:
                state = sharded.flat_state(model, optimizer)
            if snapshot_due:
                sharded.snapshot(Path(env.snapshot_dir), self.rank, step, self.saves_as, state,
                                 self._writer if self.snapshot_async else None,
                                 own=self._own(data))
            if checkpoint_due:
                sharded.checkpoint(Path(env.checkpoint_dir), step, self.saves_as, state)
            return
        checkpoint_due = checkpoint_due and self.rank == 0
        if not (snapshot_due or checkpoint_due):
            return
        payload = {"step": step, "generation": self.saves_as, "world_size": self.world_size,
                   "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        if snapshot_due:
            own = self._own(data)
            prefix = state_files.snapshot_prefix(self.rank)
            state_files.save_snapshot(Path(env.snapshot_dir), prefix, self.saves_as, step,
                                      {**payload, "own": own}, state_files.SNAPSHOTS_KEPT)
        if checkpoint_due:
            state_files.save_keeping(Path(env.checkpoint_dir), "", self.saves_as, step, payload,
                                     state_files.CHECKPOINTS_KEPT)

    def _own(self, data: Stateful | None) -> dict[str, Any]:
        """What this rank's snapshot keeps as its own (`rank_state.capture`), its data state checked
        at the first snapshot only."""
        own = rank_state.capture(self.world_size, data, self.device, check=not self._data_checked)
        self._data_checked = self._data_checked or data is not None
        return own

    def step_done(self, step: int, step_time_s: float) -> None:
        """Report a finished step through the hook (never blocks); the first one after a restore
        carries where the state came from, and the warning if it fell back."""
        if self.hook is not None:
            due, self._report_due = self._report_due, False
            self.hook.step(step, step_time_s, restore_warning=self.restore_warning if due else None,
                           restored=dict(self.restored) if due and self.restored else None)

    def report_error(self, err: BaseException) -> None:
        """Report an exception that escaped the training step."""
        if self.hook is not None:
            self.hook.error(err)

    def agree_reattempt(self) -> bool:
        """True on every rank when any rank got SIGUSR1 since the last call. A collective."""
        flag = torch.tensor([1 if self._reattempt else 0], device=self.device)
        self._reattempt = False
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def resync(self, model: torch.nn.Module, optimizer: Stateful) -> None:
        """Give every rank rank 0's model and optimizer state (before retrying a step); a sharded
        model's ranks each take their shards back from the snapshot of the last step saved (raises
        if there is none: the step cannot be retried in place, and a restart takes over). A
        collective."""
        if sharded.is_sharded(model):
            self.flush()
            from_snapshots = replace(self.env, restore=RestoreSource(kind="replica"))
            done = sharded.restore(from_snapshots, model, optimizer, self.device, checkpoints=False)
            if done is None or done.step != self._at_step:
                raise RuntimeError(
                    f"cannot retry step {self._at_step} in place: the newest shard snapshots hold "
                    f"{'no step' if done is None else f'step {done.step}'} (snapshot_every="
                    f"{self.snapshot_every}); the job restarts instead")
            return
        box = [{"model": model.state_dict(), "optimizer": optimizer.state_dict()} if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, device=self.device)
        model.load_state_dict(box[0]["model"])
        optimizer.load_state_dict(box[0]["optimizer"])

    @contextmanager
    def finishing_step(self) -> Iterator[None]:
        """The rest of a step once its collective is done (snapshot, report): a SIGTERM inside is
        held until the block ends, then ends the rank, so no rank saves less than another ran.
        Only this block has a handler: elsewhere SIGTERM keeps the kernel's default and ends the
        rank at once, even one blocked in a collective's C code, where a Python handler would not
        run until the collective timed out. Either way the rank ends by SIGTERM."""
        main = threading.current_thread() is threading.main_thread()
        if main:
            signal.signal(signal.SIGTERM, self._hold_stop)
        try:
            yield
        finally:
            if main:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if self._stop_held:
                try:
                    self.flush()
                except Exception:  # the rank still ends by SIGTERM, as the executor expects
                    log.exception("rank %d g%d: the last snapshot was not written", self.rank,
                                  self.env.generation)
                log.info("rank %d g%d: stopping, the step's state saved", self.rank, self.env.generation)
                _die_by_sigterm()

    def run(self, train: Callable[[Runtime], T], wait_s: float = reform.REFORM_WAIT_S) -> T:
        """Run `train(self)`, keeping this process where a peer's failure breaks a collective: it
        waits (`wait_s` at most) for its executor to name the next generation, re-forms the process
        group and runs `train` again, which restores as a new rank does. Any other error, or no next
        generation in time, ends the rank as before (docs/executor.md, "Survivors keep their
        processes")."""
        while True:
            try:
                return train(self)
            except Exception as err:
                if not peer_failed(err):
                    raise
                self.report_error(err)
                forget_frames(err)  # the hook keeps `err`: not the broken group its frames hold
                why = str(err).splitlines()[0][:200]
                log.warning("rank %d g%d: a peer failed (%s); waiting for the next generation in this "
                            "process", self.rank, self.env.generation, why)
            # Out of the handler: the traceback, and the failed `train`'s frames holding the broken
            # group, are gone; only then does leaving it close its connections, which is how the
            # ranks still blocked in its collectives learn of the failure.
            if not self._reform(wait_s):
                raise RuntimeError(f"rank {self.rank}: a peer failed ({why}) and no next generation "
                                   f"came for this process within {wait_s:g} s")

    def _reform(self, wait_s: float) -> bool:
        """Leave the broken process group, say so, and join the next generation's; False when none
        comes in `wait_s`, or it is not this rank's place (another rank or world size)."""
        with suppress(Exception):  # a snapshot written behind a broken step: the restore decides
            self.flush()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()  # what still refers to the broken group: its sockets close now, not some day
        if self.hook is not None:
            self.hook.waiting()
        home = Path(os.environ.get("HOME", "."))
        found = reform.wait(home, self.rank, self.env.generation, wait_s)
        if found is None or (found.rank, found.world_size) != (self.rank, self.world_size):
            log.warning("rank %d g%d: no next generation for this process (%s); ending", self.rank,
                        self.env.generation, "none came" if found is None else "another place")
            return False
        began = time.monotonic()
        if isinstance(self._store, JobStore):  # torch's own store under torchrun closes itself
            self._store.close()  # rank 0's: its server too (the next generation meets at another port)
        self._store = generation_store(found, self._timeout_s)
        dist.init_process_group(self._backend, store=dist.PrefixStore(f"g{found.generation}", self._store),
                                rank=found.rank, world_size=found.world_size,
                                timeout=timedelta(seconds=self._timeout_s))
        log.info("rank %d: re-formed the process group at generation %d in this process in %.2fs",
                 self.rank, found.generation, time.monotonic() - began)
        self.env = found
        self._reattempt = self._report_due = False
        if self.hook is not None:
            self.hook.regenerate(found.generation)
            self.hook.started()
        return True

    def install_signal_handlers(self) -> None:
        """SIGUSR1: reattempt at the next step (SIGTERM is handled only in `finishing_step`). Main thread."""
        signal.signal(signal.SIGUSR1, self._on_reattempt)

    def flush(self) -> None:
        """Wait until a snapshot still being written behind the step (`snapshot_async`) is on disk;
        raises what the write raised."""
        self._writer.wait()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self.hook is not None:
                self.hook.close()
            if dist.is_initialized():
                dist.destroy_process_group()
            if isinstance(self._store, JobStore):  # torch's own store under torchrun closes itself
                self._store.close()  # rank 0's: its server and port too

    def _on_reattempt(self, signum: int, frame: Any) -> None:
        self._reattempt = True

    def _hold_stop(self, signum: int, frame: Any) -> None:
        self._stop_held = True


def _die_by_sigterm() -> None:
    """End the process the way an unhandled SIGTERM does, so the executor sees signal 15."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


# What gloo and NCCL say when a peer is gone: a collective broken by another rank, not by this one.
PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                 "NCCL communicator was aborted", "remote process exited", "Timed out waiting")


def forget_frames(err: BaseException) -> None:
    """Drop the local variables of every frame `err` (and the errors it chained) passed through:
    whoever keeps the error (the hook does) keeps no process group, tensor or model of them."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        err = err.__context__


def peer_failed(err: BaseException) -> bool:
    """`err` is a collective broken by another rank (it died, reset its connections, or never came),
    not this rank's own error: the rank can live on into the next generation."""
    if isinstance(err, dist.DistError):
        return True
    return isinstance(err, RuntimeError) and any(sign in str(err) for sign in PEER_FAILURES)


def init_from_env(
    *, timeout_s: float | None = None, hook: Hook | None = None, snapshot_every: int = 1,
    checkpoint_every: int = 0, snapshot_async: bool = False, backend: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Runtime:
    """Join the job's process group as the executor's environment says (gloo on CPU, NCCL with CUDA).

    `timeout_s` bounds rendezvous and every collective; when not given, the job's
    `failure.collective_timeout_s` (TRAINMEDIC_COLLECTIVE_TIMEOUT_S, set by the executor) or else
    60 seconds. Installs the SIGUSR1 (reattempt) handler when called from the main thread, and
    reports `worker_start` through `hook`. `env` is where the contract is read (default: this
    process's environment). `snapshot_async` writes a sharded model's snapshots behind the next
    step (the step pays for the copy to host memory only); a rank stopped while one is written
    loses it, so a restore may go back up to two steps unless the other replica's copy landed.
    """
    env = os.environ if env is None else env
    contract = WorkerEnv.from_env(env)
    if timeout_s is None:
        timeout_s = contract.collective_timeout_s or DEFAULT_TIMEOUT_S
    began = time.monotonic()
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = None
    if backend == "nccl":
        device = torch.device("cuda", contract.local_rank)
        torch.cuda.set_device(device)
    store = join_store(contract, timeout_s, env)
    dist.init_process_group(backend, store=dist.PrefixStore(f"g{contract.generation}", store),
                            rank=contract.rank, world_size=contract.world_size,
                            timeout=timedelta(seconds=timeout_s))
    log.info("rank %d/%d of job %s g%d joined the %s process group in %.2fs", contract.rank,
             contract.world_size, contract.job, contract.generation, backend, time.monotonic() - began)
    runtime = Runtime(contract, hook=hook, snapshot_every=snapshot_every,
                      checkpoint_every=checkpoint_every, snapshot_async=snapshot_async, device=device,
                      _store=store, _backend=backend, _timeout_s=timeout_s)
    if threading.current_thread() is threading.main_thread():
        runtime.install_signal_handlers()
    if hook is not None:
        hook.started()
    return runtime
