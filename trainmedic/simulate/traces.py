"""Failure traces: faults drawn from a published mix of causes at a rate scaled to the cluster, or an
incident log replayed (docs/simulation.md, "Failure traces"). Pure: every draw comes from the
`random.Random` passed in, so one seed gives one trace for every policy.
"""

from __future__ import annotations

import hashlib
import json
import random
from bisect import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from trainmedic.recovery.coordinator.provenance import OWN_CATEGORIES, OWN_INCIDENT_IDS
from trainmedic.schemas import Incident, IncidentStatus, InvalidEvent, Severity, adapter, decode
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.scenario import FailureModel
from trainmedic.streams.core.taxonomy import CATEGORIES

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause of a mix: the source's `label`, the taxonomy `category` trainmedic would give it,
    its `weight` (a count in the source, or a share), and whether it `breaks_node` (the node is out
    until repaired) or is cured by restarting the job's processes."""

    label: str
    category: str
    weight: float
    breaks_node: bool


@dataclass(frozen=True)
class Mix:
    """A published mix of failure causes, and the per-GPU mean time to failure it comes with."""

    name: str
    causes: tuple[Cause, ...]
    mttf_gpu_h: float
    source: str

    @property
    def shares(self) -> tuple[float, ...]:
        """Each cause's weight over the total: what fraction of the failures it is."""
        total = sum(cause.weight for cause in self.causes)
        return tuple(cause.weight / total for cause in self.causes)


# The Llama 3 Herd of Models (Meta, 2024), Table 5: the 419 unexpected interruptions of the 405B
# pre-training, 54 days on 16,384 H100s. Counts as published; the table prints 30.1 % beside the
# faulty GPU's 148, which is 35.3 % of 419 (its other rows are count / 419), so the counts are used.
# Why these categories: a cable, NIC, host or power fault takes the whole node out until someone
# repairs it, which trainmedic sees as a lost node (SEV1, isolate it); a fault of the GPU board (its
# memories, its GSP, its thermal interface, its PCIe expansion board) takes the GPU off the job.
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_CAUSES = (
    Cause("faulty GPU", "gpu_lost", 148, True),
    Cause("GPU HBM3 memory", "gpu_ecc", 72, True),
    Cause("software bug", "software_error", 54, False),
    Cause("network switch/cable", "node_lost", 35, True),
    Cause("host maintenance", "node_lost", 32, True),
    Cause("GPU SRAM memory", "gpu_ecc", 19, True),
    Cause("GPU system processor", "gpu_driver", 17, True),
    Cause("NIC", "node_lost", 7, True),
    Cause("NCCL watchdog timeout", "nccl_error", 7, False),
    Cause("silent data corruption", "gpu_ecc", 6, True),
    Cause("GPU thermal interface + sensor", "gpu_lost", 6, True),
    Cause("SSD", "node_lost", 3, True),
    Cause("power supply", "node_lost", 3, True),
    Cause("server chassis", "node_lost", 2, True),
    Cause("IO expansion board", "gpu_lost", 2, True),
    Cause("dependency", "software_error", 2, False),
    Cause("CPU", "node_lost", 2, True),
    Cause("system memory", "node_lost", 2, True),
)
LLAMA3_MTTF_GPU_H = LLAMA3_DAYS * 24 * LLAMA3_GPUS / LLAMA3_INTERRUPTIONS  # 50,677 h

# Revisiting Reliability in Large-Scale Machine Learning Research Clusters (Kokolis et al., Meta,
# 2024): job MTTF 47.7 days at 8 GPUs (9,158 GPU-hours per failure) and 7.9 h at 1,024 GPUs (8,090).
# The two differ by 13 %, so a rate linear in GPUs describes both; the 1,024-GPU figure is the one
# at the scale of the jobs simulated here (and the more pessimistic).
RSC_MTTF_GPU_H = 7.9 * 1024

# Unicron: Economizing Self-Healing LLM Training at Scale (He et al., 2023, arXiv 2401.00134): its
# error types, mapped to the taxonomy. The shares are ours (the paper's distribution is not
# reproduced here): half hardware that breaks the node, half transient software and network faults.
UNICRON_CAUSES = (
    Cause("ECC error", "gpu_ecc", 14, True),
    Cause("GPU lost", "gpu_lost", 12, True),
    Cause("node lost", "node_lost", 10, True),
    Cause("NVLink error", "nvlink", 8, True),
    Cause("driver error", "gpu_driver", 6, True),
    Cause("NCCL timeout", "nccl_error", 12, False),
    Cause("task hang", "hang", 8, False),
    Cause("link flapping", "link_flap", 6, False),
    Cause("connection refused/reset", "network", 6, False),
    Cause("illegal memory access", "cuda_error", 5, False),
    Cause("CUDA error", "cuda_error", 5, False),
    Cause("process exit", "process_exit", 4, False),
    Cause("software error", "software_error", 4, False),
)

MIXES: dict[str, Mix] = {mix.name: mix for mix in (
    Mix("llama3", LLAMA3_CAUSES, LLAMA3_MTTF_GPU_H,
        "The Llama 3 Herd of Models (Meta, 2024), Table 5"),
    Mix("unicron", UNICRON_CAUSES, RSC_MTTF_GPU_H,
        "Unicron (He et al., 2023): its error types; shares ours; rate of meta-rsc"),
    Mix("meta-rsc", LLAMA3_CAUSES, RSC_MTTF_GPU_H,
        "Revisiting Reliability in Large-Scale ML Research Clusters (Kokolis et al., 2024): rate; "
        "causes of llama3"),
)}


def generate(model: FailureModel, nodes: Sequence[str], gpus_per_node: int, duration_s: float,
             rng: random.Random) -> list[Fault]:
    """A Poisson process of failures over the whole cluster for `duration_s`, in time order: the
    cluster fails at GPUs / MTTF x `rate_scale`, each failure on a node drawn uniformly, its cause
    drawn from the mix by share; a cause that breaks the node is repaired in an exponential time of
    mean `repair_h`."""
    if model.mix not in MIXES:
        raise ValueError(f"unknown failure mix {model.mix!r}; known: {', '.join(MIXES)}")
    if not nodes:
        raise ValueError("a trace needs at least one node")
    mix = MIXES[model.mix]
    mttf_s = (model.mttf_gpu_h or mix.mttf_gpu_h) * HOUR_S
    rate = len(nodes) * gpus_per_node / mttf_s * model.rate_scale
    repair_rate = 1.0 / (model.repair_h * HOUR_S)
    bounds = list(accumulate(mix.shares))
    last = len(mix.causes) - 1  # a draw above the last bound (rounding) is the last cause
    faults = []
    ts = rng.expovariate(rate)
    while ts < duration_s:
        cause = mix.causes[min(bisect(bounds, rng.random()), last)]
        node = nodes[int(rng.random() * len(nodes))]
        repair_s = rng.expovariate(repair_rate) if cause.breaks_node else 0.0
        faults.append(Fault(ts, node, cause.category, cause.label, repair_s))
        ts += rng.expovariate(rate)
    return faults


def from_incident_log(path: Path, nodes: Sequence[str], repair_h: float, rng: random.Random,
                      skipped: Counter[str] | None = None) -> list[Fault]:
    """The faults of an incident log (`trainmedic incidents export`), in time order from its first.

    Each detector incident is taken once, when it opens, at its `first_ts` (the fault, not its
    detection: the simulation adds each policy's own detection delay). A node of another cluster is
    mapped onto one of `nodes` by a stable hash of its name; an incident that names no node lands on
    the node its job's id hashes to, and one with neither is skipped. Categories of SEV1 that name
    the node break it for an exponential time of mean `repair_h`. What is left out is counted by
    reason into `skipped` when given: other events, resolutions and repeats, the coordinator's own
    incidents, warnings (telemetry gaps among them), categories the taxonomy does not know,
    incidents with no place.
    """
    if not nodes:
        raise ValueError("a replay needs at least one node")
    skips = Counter[str]() if skipped is None else skipped
    opened: dict[str, Incident] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            incident = _incident(line, f"{path}:{number}")
            why = "not an incident" if incident is None else _left_out(incident, opened)
            if why:
                skips[why] += 1
            else:
                opened[incident.id] = incident
    if not opened:
        return []
    start = min(incident.first_ts for incident in opened.values())
    known = set(nodes)
    faults = []
    for incident in sorted(opened.values(), key=lambda i: (i.first_ts, i.id)):
        category = CATEGORIES[incident.category]
        breaks = category.severity is Severity.SEV1 and category.names_node and incident.node is not None
        where = incident.node if incident.node in known else _hashed(incident.node or incident.job, nodes)
        repair_s = rng.expovariate(1.0 / (repair_h * HOUR_S)) if breaks else 0.0
        faults.append(Fault(incident.first_ts - start, where, incident.category, incident.category, repair_s))
    return faults


def _incident(line: str, where: str) -> Incident | None:
    """The incident on one line of the log; None for another event."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON: {err}") from None
    if not isinstance(data, dict) or data.get("type") != "incident":
        return None
    try:
        return decode(line, adapter("incidents"))
    except InvalidEvent as err:
        raise ValueError(f"{where}: not a valid incident: {err}") from None


def _left_out(incident: Incident, opened: dict[str, Incident]) -> str | None:
    """Why an incident is not a fault of the trace; None when it is one."""
    if incident.status is not IncidentStatus.OPEN or incident.id in opened:
        return "resolved or repeated"
    if incident.id.startswith(OWN_INCIDENT_IDS) or incident.category in OWN_CATEGORIES:
        return "the coordinator's own"
    if incident.severity is Severity.WARN:
        return "warning"
    if incident.category not in CATEGORIES:
        return "unknown category"
    if incident.node is None and incident.job is None:
        return "no node and no job"
    return None


def _hashed(name: str, nodes: Sequence[str]) -> str:
    """The node `name` stands for: the same one on every run and every machine (not `hash()`,
    which Python salts per process)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return nodes[int.from_bytes(digest, "big") % len(nodes)]
