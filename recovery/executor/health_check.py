"""The node's health check as the executor runs it on a `health_check` command: the operator's probe
(`--health-check CMD`), or the built-in NVML probe; either bounded in time, its output in length
(docs/executor.md, "The health check"). The verdicts are `core/health.py`'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainmedic.recovery.executor.core.health import GpuReading, Verdict, of_command, of_gpus

log = logging.getLogger(__name__)

OUTPUT_BYTES = 16 * 1024  # kept of what a probe writes: its end
XID_WAIT_MS = 500  # how long the built-in probe listens for Xids once every GPU is registered
DEVICES = Path("/dev")  # where a GPU node has /dev/nvidia0, ...


def argv_of(command: str) -> list[str]:
    """`--health-check CMD` as argv: split as a shell would, run without one. ValueError when empty
    or unbalanced."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("the health check command is empty")
    return argv


class HealthProbe:
    """Runs this node's check: `command` (argv) when given, else the built-in probe over `nvml` (the
    pynvml module, imported when needed; tests pass a stand-in) and the GPU devices under `devices`."""

    def __init__(self, command: list[str] | None = None, *, nvml: Any = None,
                 devices: Path = DEVICES) -> None:
        self._argv = command
        self._nvml = nvml
        self._devices = devices

    def run(self, timeout_s: float) -> Verdict:
        if self._argv:
            return run_command(self._argv, timeout_s)
        return _bounded(lambda: builtin(self._nvml, self._devices), timeout_s)


def run_command(argv: list[str], timeout_s: float) -> Verdict:
    """Run `argv` in a session of its own, stdin closed, stdout and stderr together (their last
    OUTPUT_BYTES kept); past `timeout_s`, its whole process group is killed. Its environment is the
    executor's without TRAINMEDIC_* (the node's credentials are no probe's business)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TRAINMEDIC_")}
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True, env=env)
    except OSError as err:
        return Verdict(False, f"{argv[0]} cannot run: {err}")
    tail = bytearray()
    reader = threading.Thread(target=_keep_tail, args=(process.stdout, tail), name="health-check-output",
                              daemon=True)
    reader.start()
    timed_out = None
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = timeout_s
        _kill_group(process)
    reader.join(1.0)  # a process that escaped the group may hold the pipe: its output is not waited for
    return of_command(argv[0], process.returncode, timed_out, bytes(tail))


def _keep_tail(stream, tail: bytearray) -> None:
    with stream:
        while chunk := stream.read1(OUTPUT_BYTES):
            tail += chunk
            del tail[:-OUTPUT_BYTES]


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the group it leads: start_new_session made it its own
    process.wait()


def _bounded(probe: Callable[[], Verdict], timeout_s: float) -> Verdict:
    """`probe()` in a thread of its own, or a failure when it has not answered within `timeout_s`: an
    NVML call to a GPU gone bad can block (the thread is left behind, a daemon)."""
    answer: list[Verdict] = []

    def run() -> None:
        try:
            answer.append(probe())
        except Exception as err:  # a reading nobody foresaw: the check fails, saying what
            log.exception("the built-in health check failed")
            answer.append(Verdict(False, f"the built-in probe failed: {type(err).__name__}: {err}"))

    thread = threading.Thread(target=run, name="health-check-nvml", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return answer[0] if answer else Verdict(False, f"NVML did not answer within {timeout_s:g} s")


def builtin(nvml: Any = None, devices: Path = DEVICES) -> Verdict:
    """Every GPU opened and read through NVML. Without nvidia-ml-py or a driver: passes, saying it saw
    no GPU, unless this host has GPU devices (/dev/nvidia0...), whose NVML not answering fails it."""
    present = sorted(p.name for p in devices.glob("nvidia[0-9]*")) if devices.is_dir() else []
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as err:
            return _unseen(present, f"nvidia-ml-py is not installed ({err})")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        return _unseen(present, f"NVML did not answer: {err}")
    try:
        return of_gpus(_read_all(nvml))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            log.warning("NVML shutdown: %s", err)


def _unseen(present: list[str], why: str) -> Verdict:
    if present:
        return Verdict(False, f"{why}, but this host has GPU devices ({' '.join(present[:8])})")
    return of_gpus(None, why)


def _read_all(nv: Any) -> list[GpuReading]:
    count = nv.nvmlDeviceGetCount()
    try:
        events = nv.nvmlEventSetCreate()
    except nv.NVMLError as err:
        log.warning("health check: Xid events unavailable (%s)", err)
        events = None
    handles: dict[int, Any] = {}
    readings: dict[int, GpuReading] = {}
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            nv.nvmlDeviceGetUUID(handle)
            nv.nvmlDeviceGetMemoryInfo(handle)
        except nv.NVMLError as err:
            readings[index] = GpuReading(index, error=f"cannot be opened or read ({err})")
            continue
        if events is not None:
            try:
                _optional(nv, nv.nvmlDeviceRegisterEvents, handle, nv.nvmlEventTypeXidCriticalError, events)
            except nv.NVMLError as err:
                readings[index] = GpuReading(index, error=f"cannot be watched for Xids ({err})")
                continue
        handles[index] = handle
    xids = _queued_xids(nv, events, handles) if events is not None else {}
    try:
        for index, handle in handles.items():
            readings[index] = _read(nv, index, handle, tuple(xids.get(index, ())))
    finally:
        if events is not None:
            _optional(nv, nv.nvmlEventSetFree, events)
    return [readings[index] for index in sorted(readings)]


def _read(nv: Any, index: int, handle: Any, xids: tuple[int, ...]) -> GpuReading:
    try:
        pending = _optional(nv, getattr(nv, "nvmlDeviceGetRetiredPagesPendingStatus", None), handle)
        rows = _optional(nv, getattr(nv, "nvmlDeviceGetRemappedRows", None), handle)
        uncorrected = _optional(nv, nv.nvmlDeviceGetTotalEccErrors, handle,
                                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
    except nv.NVMLError as err:  # lost while being read
        return GpuReading(index, error=f"cannot be read ({err})", xids=xids)
    return GpuReading(index, xids=xids, retirement_pending=None if pending is None else bool(pending),
                      remap_pending=None if rows is None else bool(rows[2]),
                      remap_failed=None if rows is None else bool(rows[3]), ecc_uncorrected=uncorrected)


def _optional(nv: Any, fn: Callable[..., Any] | None, *args: Any) -> Any:
    """`fn(*args)`, or None where the GPU, the driver or this pynvml does not support it; a lost GPU
    (or any other NVML error) raises."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except nv.NVMLError as err:
        if err.value in (nv.NVML_ERROR_NOT_SUPPORTED, getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", -1)):
            return None
        raise


def _queued_xids(nv: Any, events: Any, handles: dict[int, Any]) -> dict[int, list[int]]:
    """The critical Xids NVML delivers within XID_WAIT_MS, by GPU index."""
    by_handle = {_address(handle): index for index, handle in handles.items()}
    out: dict[int, list[int]] = {}
    while True:
        try:
            data = nv.nvmlEventSetWait(events, XID_WAIT_MS)
        except nv.NVMLError:
            return out  # a timeout: nothing more is queued
        index = by_handle.get(_address(data.device))
        if data.eventType & nv.nvmlEventTypeXidCriticalError and index is not None:
            out.setdefault(index, []).append(int(data.eventData))


def _address(handle: Any) -> int | None:
    """What a device handle points at: an event carries a new handle object for the same GPU."""
    return ctypes.cast(handle, ctypes.c_void_p).value
