"""GPU samples read from the driver through NVML (the `pynvml` module of nvidia-ml-py); Xids from an
NVML event set go out at once, on a sample of their GPU taken for them (docs/producers.md, "NVML (default)",
"Xids at once").
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmedic.common.errors import TrainmedicError
from trainmedic.producers.throttle import throttle_reasons
from trainmedic.schemas import GpuSample

log = logging.getLogger(__name__)

MIB = 1024 * 1024


class NvmlUnavailable(TrainmedicError):
    """No NVIDIA driver answered through NVML (no library, no driver, no permission)."""


class _GpuLost(Exception):
    """Raised inside a sample when the GPU answers NVML_ERROR_GPU_IS_LOST."""


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str | None
    links: tuple[int, ...] = ()
    xids: list[int] = field(default_factory=list)
    lost: bool = False


class NvmlGpus:
    """Every GPU of this host through NVML. `nvml` is the pynvml module; tests pass a stand-in."""

    def __init__(self, node: str, nvml: Any = None, *, event_wait_ms: int = 1) -> None:
        self.node = node
        self._nvml = nvml
        self._event_wait_ms = event_wait_ms
        self._devices: list[_Device] = []
        self._events: Any = None
        self._reported: set[tuple[int, str]] = set()
        self._initialised = False

    def open(self) -> None:
        """Start NVML, find the GPUs, register for Xid events; NvmlUnavailable when no driver answers."""
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as err:
                raise NvmlUnavailable(f"nvidia-ml-py is not installed ({err})") from None
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as err:
            raise NvmlUnavailable(f"NVML did not answer: {err}") from None
        self._initialised = True
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as err:
            self.close()
            raise NvmlUnavailable(f"NVML cannot count the GPUs: {err}") from None
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as err:
            log.warning("Xid events unavailable (%s): samples will carry no Xids", err)
        for index in range(count):
            self._devices.append(self._open_device(index))
        log.info("NVML: %d GPUs on %s", count, self.node)

    def _open_device(self, index: int) -> _Device:
        nv = self._nvml
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as err:
            log.error("GPU %d on %s cannot be opened (%s): it is not sampled", index, self.node, err)
            return _Device(index, None, None, lost=True)
        device = _Device(index, handle, None)
        try:
            device.uuid = self._read(device, "uuid", nv.nvmlDeviceGetUUID, handle)
            device.links = tuple(
                link for link in range(nv.NVML_NVLINK_MAX_LINKS)
                if self._quiet(nv.nvmlDeviceGetNvLinkState, handle, link) is not None
            )
        except _GpuLost:
            self._lose(device)
            return device
        if self._events is not None:
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self._events)
            except nv.NVMLError as err:
                log.warning("GPU %d: Xid events unavailable (%s)", index, err)
        return device

    def sample(self, now: float) -> list[GpuSample]:
        """One sample of every GPU still answering, carrying the Xids reported since its last one."""
        self._drain_xids()
        return [s for device in self._devices
                if not device.lost and (s := self._take(device, now)) is not None]

    def urgent(self, now: float) -> list[GpuSample]:
        """One sample of each GPU with Xids reported since its last one."""
        self._drain_xids()
        return [s for device in self._devices
                if device.xids and not device.lost and (s := self._take(device, now)) is not None]

    def _take(self, device: _Device, now: float) -> GpuSample | None:
        """A sample of `device` with its Xids; a lost one's last words, or None."""
        try:
            return self._sample(device, now)
        except _GpuLost:
            self._lose(device)
            if device.xids:  # its last words: typically Xid 79, fallen off the bus
                return GpuSample(ts=now, node=self.node, gpu=device.index, uuid=device.uuid,
                                 xids=tuple(device.xids))
            return None
        finally:
            device.xids.clear()

    def _sample(self, device: _Device, now: float) -> GpuSample:
        nv, h = self._nvml, device.handle
        util = self._read(device, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        memory = self._read(device, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._read(device, "power", nv.nvmlDeviceGetPowerUsage, h)
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._read(device, "throttle reasons", reasons, h)
        return GpuSample(
            ts=now, node=self.node, gpu=device.index, uuid=device.uuid,
            util=None if util is None else float(util.gpu),
            mem_used_mb=None if memory is None else memory.used / MIB,
            mem_total_mb=None if memory is None else memory.total / MIB,
            temp_c=_float(self._read(device, "temperature", nv.nvmlDeviceGetTemperature, h,
                                     nv.NVML_TEMPERATURE_GPU)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            ecc_sbe=self._read(device, "ECC corrected", nv.nvmlDeviceGetTotalEccErrors, h,
                               nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ecc_dbe=self._read(device, "ECC uncorrected", nv.nvmlDeviceGetTotalEccErrors, h,
                               nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            nvlink_errors=self._nvlink_errors(device),
            xids=tuple(device.xids),
            throttle=() if mask is None else throttle_reasons(mask),
        )

    def _nvlink_errors(self, device: _Device) -> int | None:
        """CRC (flit and data) + replay + recovery errors over all links; None when none is readable."""
        nv = self._nvml
        counters = (nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
                    nv.NVML_NVLINK_ERROR_DL_REPLAY, nv.NVML_NVLINK_ERROR_DL_RECOVERY)
        values = [
            self._read(device, f"NVLink counter {counter}", nv.nvmlDeviceGetNvLinkErrorCounter,
                       device.handle, link, counter)
            for link in device.links for counter in counters
        ]
        read = [v for v in values if v is not None]
        return sum(read) if read else None

    def _drain_xids(self) -> None:
        """Take every Xid event waiting in the event set and file it under its GPU."""
        if self._events is None:
            return
        nv = self._nvml
        by_handle = {_handle_key(d.handle): d for d in self._devices}
        while True:
            try:
                data = nv.nvmlEventSetWait(self._events, self._event_wait_ms)
            except nv.NVMLError as err:
                if err.value != nv.NVML_ERROR_TIMEOUT:
                    log.warning("NVML event wait failed (%s); trying again next round", err)
                return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            device = by_handle.get(_handle_key(data.device))
            if device is None:
                log.warning("Xid %d from an unknown GPU handle: not reported", data.eventData)
                continue
            log.warning("GPU %d: Xid %d", device.index, data.eventData)
            device.xids.append(int(data.eventData))

    def _read(self, device: _Device, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, or None when the GPU cannot say; raises _GpuLost when the GPU is gone."""
        nv = self._nvml
        try:
            return fn(*args)
        except nv.NVMLError as err:
            if err.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from None
            if (device.index, what) not in self._reported:
                self._reported.add((device.index, what))
                level = logging.INFO if err.value == nv.NVML_ERROR_NOT_SUPPORTED else logging.WARNING
                log.log(level, "GPU %d: %s unavailable (%s): reported as null", device.index, what, err)
            return None

    def _quiet(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Like `_read` for probes whose failure is an answer (e.g. a link that does not exist)."""
        nv = self._nvml
        try:
            return fn(*args)
        except nv.NVMLError as err:
            if err.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from None
            return None

    def _lose(self, device: _Device) -> None:
        device.lost = True
        log.error("GPU %d (%s) on %s is lost (NVML_ERROR_GPU_IS_LOST): no more samples from it",
                  device.index, device.uuid or "uuid unknown", self.node)

    def close(self) -> None:
        if not self._initialised:
            return
        nv = self._nvml
        try:
            if self._events is not None:
                nv.nvmlEventSetFree(self._events)
            nv.nvmlShutdown()
        except nv.NVMLError as err:
            log.warning("NVML shutdown: %s", err)
        self._events = None
        self._devices = []
        self._initialised = False


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _handle_key(handle: Any) -> int | None:
    """The address a device handle points at: event data carries a new handle object for the same GPU."""
    return ctypes.cast(handle, ctypes.c_void_p).value
