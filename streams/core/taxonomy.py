"""TAXONOMY.md as data: categories, Xid codes and error-message patterns.

Extending the detector's vocabulary means adding a row here, not an `if` elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from trainmedic.schemas.incident import Action, Severity

ACTION_OF: dict[Severity, Action] = {
    Severity.SEV1: Action.RECONFIGURE,
    Severity.SEV2: Action.RESTART,
    Severity.SEV3: Action.REATTEMPT,
    Severity.WARN: Action.ALERT,
}


class Hold(StrEnum):
    """How long job-level evidence waits for a more specific root cause (CorrelationConfig)."""

    NONE = "none"  # decided at once (hardware, time-based rules, warnings)
    EVIDENCE = "evidence"  # a rank's own fault: waits evidence_hold_s
    SYMPTOM = "symptom"  # what peers of a fault see: waits symptom_hold_s


class Resolves(StrEnum):
    """What clears an incident's evidence."""

    NEW_GENERATION = "new_generation"  # every named job steps at a newer generation
    NODE_HEALTHY = "node_healthy"  # the node's own GPUs report clean for gpu.healthy_s (never a job's report)
    PROGRESS = "progress"  # the job steps past the step it was at (or a newer generation)
    HEARTBEAT = "heartbeat"  # the node is heard from again
    OWN_RULE = "own_rule"  # the rule's own condition clears (thermal, link, straggler)


class Repeats(StrEnum):
    """How repeats of a category count for escalation (docs/detection.md, "Escalation")."""

    EACH = "each"  # every incident counts
    EPISODE = "episode"  # incidents within escalation.episode_s of their episode's first count once
    SIGNATURE = "signature"  # a repeat of its job's own error signature is the job's, not the node's


class Source(StrEnum):
    """Whose telemetry raises the category: what job reports raise is rate-limited (limits.py)."""

    NODE = "node"  # the node's agent: heartbeats and GPU samples (never limited)
    JOB = "job"  # a job's worker reports, which an executor writes (limited per node and per job)
    DETECTOR = "detector"  # the detector's own: the limit reached (carries no job's progress)


@dataclass(frozen=True)
class Category:
    """One row of TAXONOMY.md. Lower `specificity` wins when explanations compete."""

    name: str
    severity: Severity
    specificity: int
    hold: Hold
    resolves: Resolves
    names_node: bool  # the incident's node is the root-cause node
    repeats: Repeats
    source: Source
    description: str
    only: Action | None = None  # this action at any severity (None: the severity's, ACTION_OF)

    @property
    def action(self) -> Action:
        return self.only or ACTION_OF[self.severity]

    def action_at(self, severity: Severity) -> Action:
        """The action of an incident of this category opened at `severity` (escalation may raise it)."""
        return self.only or ACTION_OF[severity]


_S1, _S2, _S3, _W = Severity.SEV1, Severity.SEV2, Severity.SEV3, Severity.WARN
_GEN, _PROG, _HB, _OWN, _OK = (Resolves.NEW_GENERATION, Resolves.PROGRESS, Resolves.HEARTBEAT,
                               Resolves.OWN_RULE, Resolves.NODE_HEALTHY)
# Why: a user's bug raises the same error at every generation, on whichever node its rank runs;
# one switch reboot bounces a link (and its neighbours) several times within a few minutes.
_EACH, _EPI, _SIG = Repeats.EACH, Repeats.EPISODE, Repeats.SIGNATURE
_NODE, _JOB, _DET = Source.NODE, Source.JOB, Source.DETECTOR

CATEGORIES: dict[str, Category] = {c.name: c for c in (
    Category("gpu_ecc", _S1, 0, Hold.NONE, _OK, True, _EACH, _NODE,
             "uncorrectable ECC: an ecc_dbe increase or Xid 48, 63, 64, 94, 95, 140"),
    Category("nvlink", _S1, 1, Hold.NONE, _OK, True, _EACH, _NODE,
             "NVLink failure: Xid 74 or a rising nvlink_errors counter"),
    Category("gpu_lost", _S1, 2, Hold.NONE, _OK, True, _EACH, _NODE,
             "GPU fallen off the bus (Xid 79) or silent while its host still reports"),
    Category("gpu_driver", _S1, 3, Hold.NONE, _OK, True, _EACH, _NODE,
             "driver/GSP failure: Xid 119, 120, 154, 62"),
    Category("node_lost", _S1, 4, Hold.NONE, _HB, True, _EACH, _NODE,
             "no telemetry from a node for longer than its heartbeat timeout"),
    Category("cuda_error", _S2, 5, Hold.EVIDENCE, _GEN, True, _SIG, _JOB,
             "a rank raised a CUDA error, or an application Xid (13, 31, 43, 45, 68)"),
    Category("software_error", _S2, 6, Hold.EVIDENCE, _GEN, True, _SIG, _JOB,
             "any other exception escaping the training step"),
    Category("process_exit", _S2, 7, Hold.EVIDENCE, _GEN, True, _SIG, _JOB,
             "a rank exited with a non-zero code or a signal, with no other root cause"),
    Category("hang", _S2, 8, Hold.NONE, _PROG, True, _SIG, _JOB,
             "no step from the job for max(floor, 3 x median step time) while hosts report"),
    Category("network", _S3, 9, Hold.SYMPTOM, _PROG, False, _EACH, _JOB,
             "transient network error: connection refused or reset"),
    Category("nccl_error", _S2, 10, Hold.SYMPTOM, _GEN, False, _EACH, _JOB,
             "NCCL/gloo error or collective timeout with no other root cause"),
    Category("link_flap", _S3, 11, Hold.NONE, _OWN, True, _EPI, _NODE,
             "a data-plane NIC went down and came back"),
    Category("straggler", _W, 12, Hold.NONE, _OWN, True, _EACH, _JOB,
             "one rank's median step time is much slower than its peers'"),
    Category("thermal", _W, 13, Hold.NONE, _OWN, True, _EACH, _NODE,
             "hardware thermal throttling or an over-temperature GPU, sustained"),
    Category("telemetry_gap", _W, 14, Hold.NONE, _HB, False, _EACH, _NODE,
             "a large share of the nodes silent at once: the telemetry stopped, not the nodes"),
    Category("storm", _S2, 15, Hold.NONE, _OWN, False, _EACH, _DET,
             "job reports raised more incidents on a node or a job than limits allow: the rest are "
             "suppressed for limits.window_s; a person looks, nothing is restarted or isolated",
             Action.ALERT),
)}

# A rank's exit after its own error is fallout of that error: it ranks below every symptom.
CONSEQUENCE_SPECIFICITY = 99

# Xid code -> category. Application Xids are the program's fault: cuda_error, never isolation.
XID_CATEGORY: dict[int, str] = {
    79: "gpu_lost",
    **dict.fromkeys((48, 63, 64, 94, 95, 140), "gpu_ecc"),
    74: "nvlink",
    **dict.fromkeys((119, 120, 154, 62), "gpu_driver"),
    **dict.fromkeys((13, 31, 43, 45, 68), "cuda_error"),
}

# Clock-throttle reasons that mean heat (others, e.g. power capping, are not thermal).
THERMAL_THROTTLE = frozenset({"hw_thermal", "sw_thermal"})

# worker_error text -> category, first match wins. Collective errors come first: gloo and
# NCCL messages often quote a CUDA or socket error that is only their symptom.
ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl_error", re.compile(
        r"\bnccl|\bgloo\b|ProcessGroup(NCCL|Gloo)|collective operation timeout|"
        r"Dist(Backend|Network|Store)Error|c10d|Connection closed by peer|"
        r"NCCL communicator was aborted", re.IGNORECASE)),
    ("cuda_error", re.compile(
        r"CUDA error|CUDA out of memory|OutOfMemoryError|cudaError|CUBLAS_STATUS|CUDNN_STATUS|"
        r"illegal memory access|unspecified launch failure|device-side assert|"
        r"misaligned address|uncorrectable ECC", re.IGNORECASE)),
    ("network", re.compile(
        r"Connection refused|Connection reset|ConnectionRefusedError|ConnectionResetError|"
        r"ECONNREFUSED|ECONNRESET", re.IGNORECASE)),
)


def jobs_resolve(category: str) -> bool:
    """An incident of `category` is its jobs' to resolve: a node's fault (lost, its GPUs) resolves only
    on the node's own evidence, whatever its jobs do."""
    return CATEGORIES[category].resolves not in (Resolves.HEARTBEAT, Resolves.NODE_HEALTHY)


def classify_error(error: str) -> str:
    """The category a `worker_error` message is evidence for."""
    for category, pattern in ERROR_PATTERNS:
        if pattern.search(error):
            return category
    return "software_error"


# Parts of an error message that change between runs of the same failure (addresses, numbers:
# steps, ranks, sizes, pids): masked, so the same bug gives the same signature every time.
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d+")
SIGNATURE_CHARS = 200


def error_signature(category: str, error: str) -> str:
    """What a failure looks like, to tell a repeat of the same failure from another one: its
    category and the first line of its message ("ExceptionType: message") with numbers masked."""
    lines = error.strip().splitlines()
    first = _VARYING.sub("#", lines[0] if lines else "")
    return f"{category}: {first[:SIGNATURE_CHARS]}"


def xid_category(xids: tuple[int, ...]) -> tuple[str, int] | None:
    """The most specific known category among Xids, with the Xid that names it."""
    best: tuple[int, str, int] | None = None
    for xid in xids:
        name = XID_CATEGORY.get(xid)
        if name is not None:
            spec = CATEGORIES[name].specificity
            if best is None or spec < best[0]:
                best = (spec, name, xid)
    return None if best is None else (best[1], best[2])


def last_words(text: str | None, skip_last: bool = False, lines: int = 3, chars: int = 300) -> str:
    """A rank's last output lines as one evidence line's end, " | " between them, at most `chars` of
    their end ("" when none); `skip_last`: all but the last (a traceback whose last is the error)."""
    said = [line.strip() for line in (text or "").splitlines() if line.strip()]
    said = said[:-1] if skip_last else said
    joined = " | ".join(said[-lines:])[-chars:]
    return f" | {joined}" if joined else ""
