"""Synthetic GPUs with scripted faults, for demos, tests and recovery drills; deterministic for the same
seed, faults and sample times (docs/producers.md, "Synthetic GPUs (`--source synthetic`)").
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainmedic.common.errors import ConfigError
from trainmedic.producers.faults import EccFault, GpuFault, GpuLostFault, NvlinkFault, ThermalFault, XidFault
from trainmedic.schemas import GpuSample

MEM_TOTAL_MB = 81_559.0  # an 80 GB H100
THERMAL_RISE_C = {"hw": 28.0, "sw": 20.0}


@dataclass
class _Gpu:
    """What one synthetic GPU has accumulated: counters, pending Xids, active throttling."""

    node: str
    index: int
    uuid: str
    rng: random.Random
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    nvlink_errors: int = 0
    xids: list[int] = field(default_factory=list)
    thermal: list[tuple[str, float, float | None]] = field(default_factory=list)  # kind, from, until
    lost: bool = False


class SyntheticGpus:
    """`gpus_per_node` fake GPUs on each of `nodes`. Thread-safe: `inject` may be called while sampling."""

    def __init__(
        self, nodes: Sequence[str], gpus_per_node: int, *, start: float, seed: int = 0,
        faults: Iterable[GpuFault] = (),
    ) -> None:
        if not nodes or len(set(nodes)) != len(nodes):
            raise ConfigError("synthetic nodes must be a non-empty list of distinct names")
        if gpus_per_node < 1:
            raise ConfigError("synthetic GPUs per node must be at least 1")
        self.nodes = tuple(nodes)
        self.gpus_per_node = gpus_per_node
        self._lock = threading.Lock()
        self._gpus = [
            _Gpu(node, i, _uuid(seed, node, i), random.Random(f"{seed}/{node}/{i}"))
            for node in self.nodes for i in range(gpus_per_node)
        ]
        self._due: list[tuple[float, int, GpuFault]] = []  # (when, order, fault), kept sorted
        for fault in faults:
            self.inject(fault, now=start)

    def inject(self, fault: GpuFault, now: float) -> None:
        """Schedule `fault` for `now + fault.at_s`; raises ConfigError when it names no GPU of ours."""
        if fault.node is not None and fault.node not in self.nodes:
            raise ConfigError(f"fault names node {fault.node!r}; synthetic nodes: {', '.join(self.nodes)}")
        if fault.gpu is not None and fault.gpu >= self.gpus_per_node:
            raise ConfigError(f"fault names gpu {fault.gpu}; each node has GPUs 0-{self.gpus_per_node - 1}")
        with self._lock:
            self._due.append((now + fault.at_s, len(self._due), fault))
            self._due.sort(key=lambda item: item[:2])

    def sample(self, now: float) -> list[GpuSample]:
        """One sample of every GPU still answering, with the faults due by `now` applied."""
        with self._lock:
            self._apply_due(now)
            return [s for gpu in self._gpus if (s := _sample(gpu, now)) is not None]

    def urgent(self, now: float) -> list[GpuSample]:
        """With the faults due by `now` applied, one sample of each GPU with an Xid waiting."""
        with self._lock:
            self._apply_due(now)
            return [s for gpu in self._gpus if gpu.xids and (s := _sample(gpu, now)) is not None]

    def _apply_due(self, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            when, _, fault = self._due.pop(0)
            for gpu in self._gpus:
                if fault.targets(gpu.node, gpu.index):
                    _apply(gpu, fault, when)

    def close(self) -> None:
        """Nothing to release."""


def _apply(gpu: _Gpu, fault: GpuFault, when: float) -> None:
    if isinstance(fault, XidFault):
        gpu.xids.append(fault.code)
    elif isinstance(fault, EccFault):
        if fault.kind == "dbe":
            gpu.ecc_dbe += fault.count
        else:
            gpu.ecc_sbe += fault.count
    elif isinstance(fault, NvlinkFault):
        gpu.nvlink_errors += fault.errors
    elif isinstance(fault, ThermalFault):
        until = None if fault.for_s is None else when + fault.for_s
        gpu.thermal.append((fault.kind, when, until))
    elif isinstance(fault, GpuLostFault):
        gpu.lost = True


def _sample(gpu: _Gpu, now: float) -> GpuSample | None:
    xids, gpu.xids = tuple(gpu.xids), []
    if gpu.lost:
        # A GPU that falls off the bus still gets its last Xids out (as NVML's event set does).
        return GpuSample(ts=now, node=gpu.node, gpu=gpu.index, uuid=gpu.uuid, xids=xids) if xids else None
    hot = [kind for kind, since, until in gpu.thermal if since <= now and (until is None or now < until)]
    rng = gpu.rng
    return GpuSample(
        ts=now, node=gpu.node, gpu=gpu.index, uuid=gpu.uuid,
        util=round(min(100.0, 92.0 + rng.uniform(-6.0, 6.0)), 1),
        mem_used_mb=round(62_000.0 + rng.uniform(-2_000.0, 2_000.0), 1),
        mem_total_mb=MEM_TOTAL_MB,
        temp_c=round(62.0 + rng.uniform(-3.0, 3.0) + max((THERMAL_RISE_C[k] for k in hot), default=0.0), 1),
        power_w=round(540.0 + rng.uniform(-60.0, 60.0), 1),
        ecc_sbe=gpu.ecc_sbe, ecc_dbe=gpu.ecc_dbe, nvlink_errors=gpu.nvlink_errors,
        xids=xids, throttle=tuple(f"{kind}_thermal" for kind in sorted(set(hot))),
    )


def _uuid(seed: int, node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'trainmedic/{seed}/{node}/{index}')}"
