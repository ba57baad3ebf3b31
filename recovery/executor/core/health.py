"""What a node's health check concludes: from a probe command's exit and output, or from what NVML said of
each GPU; pure, the readings passed in (docs/executor.md, "The health check").
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.telemetry import last_lines

# An answer's reason is short: the coordinator puts it in an incident's evidence and a log line.
MAX_REASON_CHARS = 1_024
MAX_REASON_LINES = 10


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check passed (`ok`) or not, and why in a line or a few."""

    ok: bool
    reason: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What NVML said of one GPU: `error` when it could not be opened or read at all; otherwise the
    critical Xids it still had queued, whether pages wait for retirement, whether rows wait for (or
    failed) remapping, and its uncorrected ECC errors since the driver loaded (None: the GPU does not
    support that reading). Pages retired long ago are history, not a fault: the GPU no longer uses them."""

    index: int
    error: str | None = None
    xids: tuple[int, ...] = ()
    retirement_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    ecc_uncorrected: int | None = None


def bounded(text: str) -> str:
    """`text` terminal-safe and short: its last lines, at most MAX_REASON_CHARS characters."""
    return last_lines("\n".join(terminal_safe(line.rstrip("\r")) for line in text.strip().split("\n")),
                      MAX_REASON_LINES, MAX_REASON_CHARS)


def of_command(argv0: str, exit_code: int | None, timed_out_s: float | None, output: bytes) -> Verdict:
    """A probe command's verdict: exit 0 passes; any other exit, a signal (`exit_code` negative) or
    running past its time (`timed_out_s`, then killed) fails. The reason ends with the tail of what it
    wrote, escaped and bounded."""
    tail = bounded(output.decode(errors="replace"))
    if timed_out_s is not None:
        head = f"{argv0} timed out after {timed_out_s:g} s (killed)"
    elif exit_code is not None and exit_code < 0:
        head = f"{argv0} was killed by signal {-exit_code}"
    else:
        head = f"{argv0} exited {exit_code}"
    ok = timed_out_s is None and exit_code == 0
    return Verdict(ok, bounded(f"{head}: {tail}" if tail else head))


def of_gpus(readings: list[GpuReading] | None, why_none: str = "") -> Verdict:
    """The built-in probe's verdict: passes with no GPU to see (`readings` None: no NVML, no driver;
    `why_none` says which), fails on any GPU it could not read, any queued Xid, a page retirement or row
    remap pending or failed, or an uncorrected ECC error."""
    if readings is None:
        return Verdict(True, bounded(f"no GPU seen ({why_none}): nothing to check" if why_none
                                     else "no GPU seen: nothing to check"))
    if not readings:
        return Verdict(True, "NVML sees no GPU: nothing to check")
    faults = [f"GPU {r.index}: {fault}" for r in readings for fault in _faults(r)]
    if faults:
        return Verdict(False, bounded("; ".join(faults)))
    return Verdict(True, f"{len(readings)} GPU(s) read through NVML: no Xid, retired page or ECC error")


def _faults(reading: GpuReading) -> list[str]:
    if reading.error is not None:
        return [reading.error]
    out = [f"Xid {xid}" for xid in reading.xids]
    if reading.retirement_pending:
        out.append("page retirement pending (needs a reset)")
    if reading.remap_pending:
        out.append("row remapping pending (needs a reset)")
    if reading.remap_failed:
        out.append("row remapping failed")
    if reading.ecc_uncorrected:
        out.append(f"{reading.ecc_uncorrected} uncorrected ECC error(s) since the driver loaded")
    return out
