"""The incident log fold: the same log always gives the same state, and the views tell the lifecycle."""

from __future__ import annotations

import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ops.incident_log import fold, timeline, views
from ops.incident_log.views import find
from schemas import RecoveryFailed
from tests.unit.ops.incident_log import key_of, recorded


def interleave(events: list, rng: random.Random, partitions: int) -> list:
    """Events split by key into partitions, each kept in order, the partitions merged at random."""
    queues: dict[int, list] = {}
    for event in events:
        queues.setdefault(zlib.crc32(key_of(event).encode()) % partitions, []).append(event)
    rest, out = [q for q in queues.values() if q], []
    while rest:
        queue = rng.choice(rest)
        out.append(queue.pop(0))
        if not queue:
            rest.remove(queue)
    return out


def test_the_recording_covers_every_lifecycle_step() -> None:
    kinds = {e.type for e in recorded()}
    assert kinds == {"incident", "recovery_planned", "recovery_completed", "recovery_failed"}
    assert any(isinstance(e, RecoveryFailed) and e.escalation for e in recorded())


def test_folding_twice_is_folding_once() -> None:
    events = recorded()
    assert fold(events + events) == fold(events)
    assert fold([e for event in events for e in (event, event)]) == fold(events)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), partitions=st.integers(1, 6))
def test_any_interleaving_keeping_per_key_order_folds_to_the_same_state(seed: int, partitions: int) -> None:
    events = recorded()
    assert fold(interleave(events, random.Random(seed), partitions)) == fold(events)


def test_views_tell_status_recovery_and_times() -> None:
    got = {v.id: v for v in views(fold(recorded()))}
    net = got["net-1"]
    assert (net.status, net.recovery, net.incident.category) == ("resolved", "completed", "network")
    assert net.detection_delay_s == 1.0 and net.time_to_resolve_s == 43.0 and net.time_to_resume_s == 2.0
    hang = got["hang-2"]
    assert hang.status == "open" and hang.recovery == "failed" and len(hang.escalated_to) == 1
    escalated = got[hang.escalated_to[0]]
    assert escalated.escalated_from == "hang-2" and escalated.incident.severity == "SEV1"
    assert got["xid-3"].recovery in ("planned", "completed")
    assert list(got) == sorted(got, key=lambda i: (got[i].incident.first_ts, i))


def test_the_timeline_is_the_story_in_order() -> None:
    log = fold(recorded())
    steps = [e.what for e in timeline(find(log, "net-1")[0])]
    assert steps == ["detected", "opened", "evidence", "plan issued", "recovered", "evidence", "resolved"]
    hang = [e.what for e in timeline(find(log, "hang-2")[0])]
    assert hang[:2] == ["detected", "opened"] and "recovery failed" in hang
    escalated = find(log, find(log, "hang-2")[0].escalated_to[0])[0]
    assert "escalated" in [e.what for e in timeline(escalated)]
    stamps = [e.ts for e in timeline(find(log, "hang-2")[0])]
    assert stamps == sorted(stamps)


def test_find_takes_an_unambiguous_prefix() -> None:
    log = fold(recorded())
    assert [v.id for v in find(log, "hang")] == ["hang-2"]
    assert find(log, "nothing") == []
