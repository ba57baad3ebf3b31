"""A small stand-in for the `pynvml` module: GPUs in memory behind the same names as the real
module (constants, error classes, functions). test_nvml.py checks the names against pynvml."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_MAX_LINKS = 36
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040


class NVMLError(Exception):
    """Like pynvml's: `value` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 10: "Timeout", 12: "NVML Shared Library Not Found",
                15: "GPU is lost"}.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotSupported(NVMLError):  # the class names are pynvml's
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_INVALID_ARGUMENT)


class NVMLError_Timeout(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_TIMEOUT)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


@dataclass
class FakeGpu:
    """One GPU's readings. A name in `unsupported` answers NOT_SUPPORTED; `lost` answers GPU_IS_LOST."""

    uuid: str
    util: int = 95
    mem_used: int = 60 * 1024**3
    mem_total: int = 80 * 1024**3
    temp: int = 61
    power_mw: int = 500_000
    ecc: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})  # error type -> count
    links: dict[int, dict[int, int]] = field(default_factory=dict)  # link -> counter -> value
    throttle: int = 0
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False


class FakeNvml:
    """The pynvml functions the producer calls, over `gpus`; `xid(index, code)` queues an Xid event."""

    def __init__(self, gpus: list[FakeGpu], *, library: bool = True) -> None:
        self.gpus = gpus
        self.library = library
        self.events: list[SimpleNamespace] = []
        self.registered: set[int] = set()
        self.calls: list[str] = []
        for name, value in globals().items():
            if name.startswith(("NVML", "nvml")):
                setattr(self, name, value)

    def xid(self, index: int, code: int) -> None:
        self.events.append(SimpleNamespace(device=_handle(index), eventType=nvmlEventTypeXidCriticalError,
                                           eventData=code, gpuInstanceId=0, computeInstanceId=0))

    def _gpu(self, handle: int, what: str) -> FakeGpu:
        self.calls.append(what)
        gpu = self.gpus[handle - _BASE]
        if gpu.lost:
            raise NVMLError_GpuIsLost()
        if what in gpu.unsupported:
            raise NVMLError_NotSupported()
        return gpu

    def nvmlInit(self) -> None:
        if not self.library:
            raise NVMLError_LibraryNotFound()

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return _handle(index)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle, "uuid").uuid

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(handle, "util").util, memory=30)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle, "memory")
        return SimpleNamespace(total=gpu.mem_total, used=gpu.mem_used, free=gpu.mem_total - gpu.mem_used)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._gpu(handle, "temperature").temp

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._gpu(handle, "power").power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        return self._gpu(handle, "ecc").ecc[error_type]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link not in self._gpu(handle, "nvlink").links:
            raise NVMLError_InvalidArgument()
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int:
        counters = self._gpu(handle, "nvlink").links[link]
        if counter not in counters:
            raise NVMLError_NotSupported()
        return counters[counter]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._gpu(handle, "throttle").throttle

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: str) -> None:
        self._gpu(handle, "events")
        self.registered.add(handle - _BASE)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise NVMLError_Timeout()
        return self.events.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls.append("free")


_BASE = 0x1000  # handles are addresses in real NVML; never 0


def _handle(index: int) -> int:
    return _BASE + index
