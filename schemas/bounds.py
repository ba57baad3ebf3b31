"""The bounds every contract value keeps (finite times, sane numbers, capped sizes, safe names): they
reject only what no honest producer sends. A v1 reader accepts every value inside them;
widening one is compatible, narrowing one is a contract change.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

# Times: Unix seconds from the epoch to the last second a datetime can show (9999-12-31T23:59:59Z),
# so every valid time renders as a date; durations are bounded by the same span.
MAX_TS = 253_402_300_799.0
MAX_INT = 2**63 - 1  # what a 64-bit reader (Java, Go, a database column) holds
MAX_TEXT = 1 << 20  # characters of one string: no longer one fits a Kafka message (1 MB by default)
MAX_ID = 1_024  # characters of an id (incident, plan, command, job)
MAX_NAME = 253  # characters of a host or NIC name (a DNS name's limit)
MAX_ITEMS = 1 << 20  # entries of one list or table (ranks of a job, nodes of a cluster)
MAX_SMALL_ITEMS = 4_096  # entries of a short list (Xids, throttle reasons, links, argv, evidence)
MAX_FLOPS = 1e30  # FLOP/s of one job: far above any cluster, far below float overflow in the planner
MAX_WEIGHT = 1e9

Timestamp = Annotated[float, Field(ge=0, le=MAX_TS, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=MAX_TS, allow_inf_nan=False)]
Finite = Annotated[float, Field(ge=-MAX_FLOPS, le=MAX_FLOPS, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
Int64 = Annotated[int, Field(ge=-MAX_INT - 1, le=MAX_INT)]
Flops = Annotated[float, Field(ge=0, le=MAX_FLOPS, allow_inf_nan=False)]
Weight = Annotated[float, Field(gt=0, le=MAX_WEIGHT, allow_inf_nan=False)]

# Host and NIC names: letters, digits and `._-:` (and `_`, as in `mlx5_0`), so that a name is safe
# in a label, a file name, a log line and an environment variable.
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9._:\-]+$")]


def no_nul(text: str) -> str:
    """The text, if it has no NUL byte (`schemas/twins.py` keeps this check as a pattern)."""
    if "\x00" in text:
        raise ValueError("must not contain a NUL byte (it cannot be passed to a process)")
    return text


# Text that may end up in a process's argv or environment (job ids, paths, argv words).
ProcessText = Annotated[str, StringConstraints(max_length=MAX_TEXT), AfterValidator(no_nul)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID), AfterValidator(no_nul)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
