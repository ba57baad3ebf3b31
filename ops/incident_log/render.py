"""Text for people: the incident table, one incident's fields, its timeline."""

from __future__ import annotations

from datetime import UTC, datetime

from ops.incident_log.views import Entry, IncidentView

COLUMNS = ("ID", "STATUS", "SEV", "CATEGORY", "JOB", "NODE", "OPENED (UTC)", "DELAY", "RESOLVED IN",
           "RECOVERY")


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
            span(view.time_to_resolve_s), view.recovery)


def table(rows: list[tuple[str, ...]], header: tuple[str, ...] = COLUMNS) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in (header, *rows)]
    return "\n".join(lines)


def details(view: IncidentView) -> str:
    """Every field of one incident, its evidence and its recovery."""
    inc = view.incident
    fields = [
        ("id", inc.id), ("status", view.status), ("category", inc.category), ("severity", str(inc.severity)),
        ("action", str(inc.action)), ("job", inc.job or "-"), ("node", inc.node or "-"),
        ("ranks", ", ".join(map(str, inc.ranks)) or "-"), ("earliest evidence", iso(inc.first_ts)),
        ("opened", iso(view.opened.ts if view.opened else None)),
        ("detection delay", span(view.detection_delay_s)),
        ("resolved", iso(view.resolved.ts if view.resolved else None)),
        ("time to resolve", span(view.time_to_resolve_s)), ("recovery", view.recovery),
        ("time to resume", span(view.time_to_resume_s)),
        ("escalated from", view.escalated_from or "-"), ("escalated to", ", ".join(view.escalated_to) or "-"),
    ]
    width = max(len(k) for k, _ in fields)
    lines = [f"{k + ':':{width + 1}} {v}" for k, v in fields]
    lines.append("evidence:")
    lines += [f"  - {line}" for line in inc.evidence] or ["  (none)"]
    if view.plans:
        lines.append("plans:")
        lines += [f"  - {p.plan_id} {p.kind} {p.job} generation {p.generation}: "
                  f"[{' '.join(p.previous)}] → [{' '.join(p.nodes)}] at {iso(p.ts)}" for p in view.plans]
    if view.skipped:
        lines.append(f"no action: {view.skipped.reason}")
    if view.restore_warnings:
        lines.append("RESTORE FELL BACK (steps lost):")
        lines += [f"  - {w.job} generation {w.generation} rank {w.rank} on {w.node}: {w.restore_warning}"
                  for w in view.restore_warnings]
    return "\n".join(lines)


def story(view: IncidentView, entries: list[Entry]) -> str:
    """The timeline with times relative to the earliest evidence."""
    origin = view.incident.first_ts
    head = f"{view.id}  {view.incident.severity} {view.incident.category}  (t0 = {iso(origin)} UTC)"
    width = max(len(e.what) for e in entries)
    return "\n".join([head, *(f"  {entry_time(e.ts - origin):>10}  {e.what:{width}}  {e.detail}"
                              for e in entries)])


def entry_time(offset_s: float) -> str:
    return f"{'+' if offset_s >= 0 else '-'}{abs(offset_s):.3f}s"
