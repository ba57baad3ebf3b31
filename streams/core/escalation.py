"""Escalation (TAXONOMY.md): a cheaper action that did not cure the problem escalates, and a
repeat blames what it correlates with: the job when it follows the job, else the node."""

from __future__ import annotations

from trainmedic.schemas.incident import Severity
from trainmedic.streams.core.config import EscalationConfig
from trainmedic.streams.core.state import DetectorState
from trainmedic.streams.core.taxonomy import CATEGORIES, Repeats

_ESCALATES = {Severity.SEV3: Severity.SEV2, Severity.SEV2: Severity.SEV1}


def escalate(
    cfg: EscalationConfig, state: DetectorState, category: str, severity: Severity, *,
    scope: str, node: str | None, job: str | None, signature: str | None, ts: float,
) -> tuple[Severity, list[str]]:
    """The severity an incident opens with, and evidence lines saying why it was (not) raised.

    SEV3 counts per (category, job or node), episodes of an EPISODE category once; SEV2 counts
    per root-cause node, so incidents that name no node (collective errors) never make a node
    look bad, and a repeat of its job's own error signature counts against no node at all."""
    lines: list[str] = []
    if severity is Severity.SEV3:
        severity = _sev3(cfg, state.sev3_history, category, scope, ts, lines)
    if severity is Severity.SEV2 and node is not None:
        if CATEGORIES[category].repeats is not Repeats.SIGNATURE:
            signature = None  # an escalated link flap: the node's, whatever job runs there
        severity = _sev2(cfg, state, node, job, signature, ts, lines)
    return severity, lines


def _sev3(cfg: EscalationConfig, history: dict[str, list[float]], category: str, scope: str,
          ts: float, lines: list[str]) -> Severity:
    kept = _in_window(history, f"{category}|{scope}", ts - cfg.sev3_window_s)
    episodes = CATEGORIES[category].repeats is Repeats.EPISODE
    if episodes and kept and ts - kept[-1] < cfg.episode_s:
        lines.append(f"same {category} episode on {scope} as at {kept[-1]:.3f} "
                     f"(within {cfg.episode_s:g}s): not counted again")
        return Severity.SEV3
    return _count(kept, ts, Severity.SEV3, cfg.sev3_count, cfg.sev3_window_s, lines,
                  repeat=f"{category} episode" if episodes else category, scope=scope)


def _sev2(cfg: EscalationConfig, state: DetectorState, node: str, job: str | None,
          signature: str | None, ts: float, lines: list[str]) -> Severity:
    """A repeat of the job's own signature follows the job: neither it nor the failure it repeats
    counts against a node. Otherwise the `sev2_count`-th on the node in the window is SEV1."""
    since = ts - cfg.sev2_window_s
    history = state.sev2_history
    kept = _in_window(history, node, since)
    for stale in [name for name, errors in state.job_errors.items() if errors[-1][0] <= since]:
        del state.job_errors[stale]  # its last failure left the window: nothing to repeat
    if job is not None and signature:  # "" : not known (a clue from a format-2 checkpoint)
        errors = [e for e in state.job_errors.get(job, ()) if e[0] > since]
        same = [e for e in errors if e[2] == signature]
        errors.append([ts, node, signature])
        state.job_errors[job] = errors
        if same:
            for t, where, _ in same:  # known now to be the job's: no longer the node's
                if t in history.get(where, ()):
                    history[where].remove(t)
            first_ts, first_node, _ = same[0]
            lines.append(f"follows job {job}: failed the same way at {first_ts:.3f} on {first_node} "
                         f"({signature}); the job's failure, not counted against a node")
            return Severity.SEV2
    return _count(kept, ts, Severity.SEV2, cfg.sev2_count, cfg.sev2_window_s, lines,
                  repeat="SEV2", scope=f"node {node}")


def _in_window(history: dict[str, list[float]], key: str, since: float) -> list[float]:
    """The times counted under `key` after `since`; the older ones are dropped from `history`."""
    kept = [t for t in history.get(key, ()) if t > since]
    history[key] = kept
    return kept


def _count(kept: list[float], ts: float, severity: Severity, count: int, window_s: float, lines: list[str],
           *, repeat: str, scope: str) -> Severity:
    """Count a repeat at `ts` among those `kept` in the window: the `count`-th escalates `severity` one
    step, said in `lines` ("escalated SEV3->SEV2: `repeat` #3 on `scope` within 600s")."""
    kept.append(ts)
    if len(kept) < count:
        return severity
    raised = _ESCALATES[severity]
    lines.append(f"escalated {severity}->{raised}: {repeat} #{len(kept)} on {scope} within {window_s:g}s")
    return raised
