"""The incident log fold: the same log always gives the same state, and the views tell the lifecycle."""

from __future__ import annotations

import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.ops.incident_log import placed, recorded
from trainmedic.ops.incidents import fold, timeline, views
from trainmedic.ops.incidents.render import details
from trainmedic.ops.incidents.views import find
from trainmedic.schemas import RecoveryFailed, Restored, WorkerStepped
from trainmedic.schemas.restores import restores


def interleave(log: list, rng: random.Random, partitions: int) -> list:
    """Events split by topic and key into partitions, each kept in order, the partitions merged at
    random: the detector's incidents and the coordinator's lifecycle come from two topics."""
    queues: dict[tuple[str, int], list] = {}
    for (topic, key), event in log:
        queues.setdefault((topic, zlib.crc32(key.encode()) % partitions), []).append(event)
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
    assert fold(interleave(placed(), random.Random(seed), partitions)) == fold(events)


def test_views_tell_status_recovery_and_times() -> None:
    got = {v.id: v for v in views(fold(recorded()))}
    net = got["net-1"]
    assert (net.status, net.recovery, net.incident.category) == ("resolved", "completed", "network")
    assert net.detection_delay_s == 1.0 and net.time_to_resolve_s == 43.0 and net.time_to_ack_s == 2.0
    assert net.time_to_resume_s is None  # no step of the job in this log: acknowledged is not resumed
    hang = got["hang-2"]
    assert hang.status == "open" and hang.recovery == "failed" and len(hang.escalated_to) == 1
    escalated = got[hang.escalated_to[0]]
    assert escalated.escalated_from == "hang-2" and escalated.incident.severity == "SEV1"
    assert got["xid-3"].recovery in ("planned", "completed")
    assert list(got) == sorted(got, key=lambda i: (got[i].incident.first_ts, i))


def test_the_timeline_is_the_story_in_order() -> None:
    log = fold(recorded())
    steps = [e.what for e in timeline(find(log, "net-1")[0])]
    assert steps == ["detected", "evidence", "opened", "plan issued", "acknowledged", "evidence", "resolved"]
    hang = [e.what for e in timeline(find(log, "hang-2")[0])]
    assert hang[:2] == ["detected", "opened"] and "recovery failed" in hang
    escalated = find(log, find(log, "hang-2")[0].escalated_to[0])[0]
    assert "escalated" in [e.what for e in timeline(escalated)]
    stamps = [e.ts for e in timeline(find(log, "hang-2")[0])]
    assert stamps == sorted(stamps)


def test_a_restore_that_fell_back_is_in_the_story_of_the_incident_whose_plan_it_restored() -> None:
    events = recorded()
    [plan] = [e for e in events if e.type == "recovery_planned" and e.incident_id == "xid-3"]
    warning = "no replica snapshot of rank 4 on n3: restored step 65 from the checkpoint /ckpt/x.pt"
    common = {"node": "n3", "job": plan.job, "world_size": 6, "step": 65, "step_time": 0.1}
    steps = [WorkerStepped(ts=plan.ts + 3, rank=2, generation=plan.generation, restore_warning=warning,
                           **common),
             WorkerStepped(ts=plan.ts + 4, rank=2, generation=plan.generation, **common),  # no warning
             WorkerStepped(ts=plan.ts + 3, rank=2, generation=plan.generation + 5, restore_warning=warning,
                           **common)]  # a later generation: another plan's
    log = fold([*events, *steps])
    story = timeline(find(log, "xid-3")[0])
    [fell_back] = [e for e in story if e.what == "RESTORE FELL BACK"]
    assert fell_back.ts == plan.ts + 3 and warning in fell_back.detail and "rank 2" in fell_back.detail
    assert [e.what for e in story].index("plan issued") < [e.what for e in story].index("RESTORE FELL BACK")
    assert "RESTORE FELL BACK" not in [e.what for e in timeline(find(log, "net-1")[0])]
    assert warning in details(find(log, "xid-3")[0])
    assert fold([*reversed(steps), *events]) == log


def test_where_each_generations_state_came_from_is_in_the_story_one_line_per_generation() -> None:
    events = recorded()
    [plan] = [e for e in events if e.type == "recovery_planned" and e.incident_id == "xid-3"]
    common = {"node": "n3", "job": plan.job, "world_size": 6, "step": 66, "step_time": 0.1}
    shards = [Restored(kind="replica", step=65, seconds=0.2 + rank / 10, read=100 * rank, received=7)
              for rank in range(3)]
    steps = [WorkerStepped(ts=plan.ts + 3 + rank, rank=rank, generation=plan.generation,
                           restored=shards[rank], **common) for rank in range(3)]
    steps += [WorkerStepped(ts=plan.ts + 9, rank=0, generation=plan.generation + 5, **common,
                            restored=Restored(kind="checkpoint", step=40, seconds=1.0))]  # another plan's
    log = fold([*events, *steps])
    [restored] = [e for e in timeline(find(log, "xid-3")[0]) if e.what == "restored"]
    assert restored.ts == plan.ts + 3
    assert restored.detail == (f"{plan.job} generation {plan.generation}: 3 ranks restored step 65 from "
                               "replica snapshots (300 elements read on their own nodes, 21 received from "
                               "other nodes), slowest 0.40s")
    assert restored.detail in details(find(log, "xid-3")[0])
    assert fold([*reversed(steps), *events]) == log
    mixed = (("replica", 65), ("checkpoint", 60))
    whole = restores([WorkerStepped(ts=1, rank=r, generation=2, **common, restored=Restored(
        kind=kind, step=step, seconds=0.5)) for r, (kind, step) in enumerate(mixed)])
    assert [r.describe() for r in whole] == [
        f"{plan.job} generation 2: 2 ranks restored steps 60, 65 from checkpoint and replica snapshots, "
        "slowest 0.50s"]


def test_find_takes_an_unambiguous_prefix() -> None:
    log = fold(recorded())
    assert [v.id for v in find(log, "hang")] == ["hang-2"]
    assert find(log, "nothing") == []
