"""Escalation (TAXONOMY.md): a cheaper action that did not cure the problem escalates."""

from __future__ import annotations

from schemas.incident import Severity
from streams.core.config import EscalationConfig


def _recent(history: dict[str, list[float]], key: str, ts: float, window_s: float) -> list[float]:
    """The key's incident times within the window ending at ts, pruned in place, plus ts."""
    kept = [t for t in history.get(key, ()) if t > ts - window_s]
    kept.append(ts)
    history[key] = kept
    return kept


def escalate(
    cfg: EscalationConfig, sev3: dict[str, list[float]], sev2: dict[str, list[float]],
    category: str, severity: Severity, scope: str, node: str | None, ts: float,
) -> tuple[Severity, list[str]]:
    """The severity an incident opens with, and evidence lines saying why it was raised.

    SEV3 counts per (category, job or node); SEV2 counts per root-cause node, so incidents
    that name no node (collective errors) never make a node look bad."""
    lines = []
    if severity is Severity.SEV3:
        seen = _recent(sev3, f"{category}|{scope}", ts, cfg.sev3_window_s)
        if len(seen) >= cfg.sev3_count:
            severity = Severity.SEV2
            lines.append(f"escalated SEV3->SEV2: {category} #{len(seen)} on {scope} "
                         f"within {cfg.sev3_window_s:g}s")
    if severity is Severity.SEV2 and node is not None:
        seen = _recent(sev2, node, ts, cfg.sev2_window_s)
        if len(seen) >= cfg.sev2_count:
            severity = Severity.SEV1
            lines.append(f"escalated SEV2->SEV1: SEV2 #{len(seen)} on node {node} "
                         f"within {cfg.sev2_window_s:g}s")
    return severity, lines
