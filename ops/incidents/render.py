"""Text for people: the incident table, one incident's fields, its timeline. Every line is made
terminal-safe as it is written: evidence and reasons carry ranks' text, escapes included
(docs/security.md#the-broker-protects-itself-and-what-is-rendered)."""

from __future__ import annotations

from datetime import UTC, datetime

from trainmedic.ops.incidents.evidence import clock, offset, readable
from trainmedic.ops.incidents.phases import PHASES, Phase
from trainmedic.ops.incidents.views import Entry, IncidentView, evidence_entries
from trainmedic.schemas.printable import terminal_safe

COLUMNS = ("ID", "STATUS", "SEV", "CATEGORY", "JOB", "NODE", "OPENED (UTC)", "DETECT", "PUBLISHED",
           "RESOLVED IN", "RECOVERY")
LEGEND = ("DETECT: first evidence → incident decided; PUBLISHED: first evidence → incident on Kafka; "
          "RESOLVED IN: first evidence → resolved. RECOVERY completed: every command acknowledged; "
          "queued: the job was stopped and waits for nodes.")


def iso(ts: float | None) -> str:
    """The time as UTC text; one no date can show (the contract keeps them out) as the number."""
    if ts is None:
        return "-"
    try:
        when = datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):
        return repr(ts)
    return when.isoformat(sep=" ", timespec="milliseconds").removesuffix("+00:00")


def span(seconds: float | None) -> str:
    """A duration in the unit that reads best: 850ms, 12.3s, 4m05s, 2h07m."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def row(view: IncidentView) -> tuple[str, ...]:
    inc = view.incident
    return (view.id, view.status, str(inc.severity), inc.category, inc.job or "-", inc.node or "-",
            iso(view.opened.ts if view.opened else None), span(view.detection_delay_s),
            span(view.publication_delay_s), span(view.time_to_resolve_s), view.recovery)


def table(rows: list[tuple[str, ...]], header: tuple[str, ...] = COLUMNS) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    rows = [tuple(map(terminal_safe, r)) for r in rows]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in (header, *rows)]
    return "\n".join(lines)


def _measured(seconds: float | None, what: str) -> str:
    return "-" if seconds is None else f"{span(seconds)} ({what})"


def resume(view: IncidentView) -> str:
    """The time to resume, what it spans, or why there is none."""
    if view.time_to_resume_s is not None:
        last = max(view.resumed, key=lambda r: r.ts)
        return f"{span(view.time_to_resume_s)} (first evidence → first step of {last.job} generation " \
               f"{last.generation} after the repair)"
    if view.plans and set(view.queued_jobs) == {p.job for p in view.plans}:
        return f"- (not resumed: {', '.join(view.queued_jobs)} queued, waiting for nodes)"
    return "- (no step after the repair seen yet)" if view.plans else "-"


def details(view: IncidentView) -> str:
    """Every field of one incident, its evidence in the order it was seen, and its recovery."""
    inc = view.incident
    origin = inc.first_ts
    fields = [
        ("id", inc.id), ("status", view.status), ("category", inc.category), ("severity", str(inc.severity)),
        ("action", str(inc.action)), ("job", inc.job or "-"), ("node", inc.node or "-"),
        ("ranks", ", ".join(map(str, inc.ranks)) or "-"), ("first evidence", iso(origin)),
        ("opened", iso(view.opened.ts if view.opened else None)), ("on kafka", iso(view.published)),
        ("detection delay", _measured(view.detection_delay_s, "first evidence → incident")),
        ("publication delay", _measured(view.publication_delay_s, "first evidence → on Kafka")),
        ("resolved", iso(view.resolved.ts if view.resolved else None)),
        ("time to resolve", _measured(view.time_to_resolve_s, "first evidence → resolved")),
        ("recovery", view.recovery),
        ("recovery acked", _measured(view.time_to_ack_s, "first evidence → every command done")),
        ("time to resume", resume(view)),
        ("escalated from", view.escalated_from or "-"), ("escalated to", ", ".join(view.escalated_to) or "-"),
    ]
    width = max(len(k) for k, _ in fields)
    lines = [f"{k + ':':{width + 1}} {v}" for k, v in fields]
    lines.append("evidence (UTC, from the first evidence):")
    lines += [f"  - {clock(e.ts)} {offset(e.ts - origin):>9}  {readable(e.detail, origin)}"
              for e in evidence_entries(view)] or ["  (none)"]
    if view.plans:
        lines.append("plans:")
        lines += [f"  - {p.plan_id} {p.kind} {p.job} generation {p.generation}: "
                  f"[{' '.join(p.previous)}] → [{' '.join(p.nodes)}] at {iso(p.ts)}"
                  f"{'' if p.nodes else ' (no nodes: the job is stopped and queued)'}" for p in view.plans]
    if view.skipped:
        lines.append(f"no action: {view.skipped.reason}")
    for job, found in view.phases:
        lines += phase_lines(job, found)
    if view.restores:
        lines.append("restored:")
        lines += [f"  - {r.describe()}" for r in view.restores]
    if view.restore_warnings:
        lines.append("RESTORE FELL BACK (steps lost):")
        lines += [f"  - {w.job} generation {w.generation} rank {w.rank} on {w.node}: {w.restore_warning}"
                  for w in view.restore_warnings]
    return "\n".join(map(terminal_safe, lines))


def phase_lines(job: str, found: tuple[Phase, ...]) -> list[str]:
    """Where the seconds of `job`'s recovery went, a phase a line, and their total."""
    spans = {name: spans for name, _, spans in PHASES}
    width = max(len(name) for name, _, _ in PHASES)
    return [f"recovery of {job} by phase (event time):",
            *(f"  {p.name:{width}} {p.seconds:8.3f} s  {spans[p.name]}" for p in found),
            f"  {'total':{width}} {sum(p.seconds for p in found):8.3f} s  first evidence → first step"]


def story(view: IncidentView, entries: list[Entry]) -> str:
    """The timeline: UTC times, offsets from the earliest evidence, instants in details made readable."""
    origin = view.incident.first_ts
    head = f"{view.id}  {view.incident.severity} {view.incident.category}  (t0 = {iso(origin)} UTC)"
    width = max(len(e.what) for e in entries)
    lines = [head, *(f"  {clock(e.ts)} {offset(e.ts - origin):>10}  {e.what:{width}}  "
                     f"{readable(e.detail, origin)}" for e in entries)]
    return "\n".join(map(terminal_safe, lines))
