"""The numbers the incident log shows say what they measure: the detection delay and the delay to
Kafka from the first evidence, the time to resume up to the job's first step after the repair
(not the ack), no recovery "completed" for a job left without nodes, and a story in event time
with readable instants."""

from __future__ import annotations

import random
import re

from trainmedic.ops.incidents.evidence import clock, readable, stamped
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.render import details, row, story
from trainmedic.ops.incidents.views import find, timeline
from trainmedic.schemas import Incident, RecoveryCompleted, RecoveryPlanned, WorkerStepped

T0 = 1_764_554_400.0  # 2025-12-01 02:00:00 UTC: the first evidence
RAW_INSTANT = re.compile(r"\d{9,}\.\d+")


def opened(**fields) -> Incident:
    base = dict(ts=T0 + 1.0, id="exit-1", status="open", category="process_exit", severity="SEV2",
                action="restart", job="llm", node="n1", ranks=(3,), first_ts=T0,
                evidence=(f"{T0 + 1.0:.3f} absorbed: rank 0 on n0: gloo connection closed",
                          f"{T0:.3f} rank 3 on n1: exited with signal 9",
                          f"{T0 + 0.4:.3f} rank 2 on n1: no telemetry since {T0 - 0.6:.3f}"))
    return Incident(**{**base, **fields})


def plan(kind: str = "restart", generation: int = 1, nodes=("n0", "n1"),
         ts: float = T0 + 3.5) -> RecoveryPlanned:
    return RecoveryPlanned(ts=ts, plan_id="p-1", incident_id="exit-1", job="llm", kind=kind,
                           generation=generation, nodes=nodes, previous=("n0", "n1"))


def done(generation: int = 1, ts: float = T0 + 4.7) -> RecoveryCompleted:
    return RecoveryCompleted(ts=ts, plan_id="p-1", job="llm", generation=generation)


def step(ts: float, generation: int, rank: int = 0) -> WorkerStepped:
    return WorkerStepped(ts=ts, node="n0", job="llm", rank=rank, world_size=4, generation=generation, step=40,
                         step_time=0.25)


def view_of(*events, published: dict[str, float] | None = None):
    history = IncidentHistory()
    for event in events:
        apply(history, event, (published or {}).get(getattr(event, "status", ""), None))
    [view] = find(history, "exit-1")
    return view


def test_the_delay_to_kafka_is_told_apart_from_the_detection_delay() -> None:
    view = view_of(opened(), published={"open": T0 + 3.6})
    assert view.detection_delay_s == 1.0 and round(view.publication_delay_s, 3) == 3.6
    assert row(view)[7:9] == ("1.0s", "3.6s")  # DETECT, PUBLISHED
    text = details(view)
    assert "detection delay:   1.0s (first evidence → incident)" in text
    assert "publication delay: 3.6s (first evidence → on Kafka)" in text
    assert "on kafka:          2025-12-01 02:00:03.600" in text


def test_the_first_time_on_kafka_counts_whatever_order_the_copies_are_read_in() -> None:
    copies = [(opened(), T0 + 3.6), (opened(), T0 + 9.0), (opened(), T0 + 5.0)]
    for _ in range(5):
        random.shuffle(copies)
        history = IncidentHistory()
        for event, published in copies:
            apply(history, event, published)
        assert round(find(history, "exit-1")[0].publication_delay_s, 3) == 3.6


def test_time_to_resume_runs_to_the_first_step_of_the_new_generation_not_to_the_ack() -> None:
    steps = [step(T0 - 1.0, generation=0), step(T0 + 9.9, generation=1, rank=1), step(T0 + 9.6, generation=1),
             step(T0 + 12.0, generation=2)]
    view = view_of(opened(), plan(), done(), *steps)
    assert round(view.time_to_ack_s, 3) == 4.7
    assert round(view.time_to_resume_s, 3) == 9.6
    text = details(view)
    assert "recovery acked:    4.7s (first evidence → every command done)" in text
    assert "time to resume:    9.6s (first evidence → first step of llm generation 1 after the repair)" \
        in text
    resumed = [e for e in timeline(view) if e.what == "resumed"]
    assert [e.ts for e in resumed] == [T0 + 9.6]


def test_no_step_after_the_repair_is_no_time_to_resume() -> None:
    view = view_of(opened(), plan(), done(), step(T0 + 0.5, generation=0))
    assert view.time_to_resume_s is None and view.recovery == "completed"
    assert "time to resume:    - (no step after the repair seen yet)" in details(view)


def test_after_a_reattempt_the_first_step_after_its_ack_counts() -> None:
    steps = [step(T0 + 1.0 + i * 0.25, generation=0) for i in range(20)]  # the ranks kept stepping
    view = view_of(opened(), plan(kind="reattempt", generation=0), done(generation=0, ts=T0 + 4.6), *steps)
    assert round(view.time_to_resume_s, 3) == 4.75
    [acked] = [e.detail for e in timeline(view) if e.what == "acknowledged"]
    assert acked.endswith("done (ranks retried in place)")


def test_a_job_moved_to_no_nodes_is_queued_never_completed_or_up() -> None:
    view = view_of(opened(), plan(kind="reconfigure", nodes=()), done(), step(T0 + 0.5, generation=0))
    assert view.recovery == "queued" and view.queued_jobs == ("llm",)
    assert view.time_to_ack_s is None and view.time_to_resume_s is None
    text = details(view)
    assert "completed" not in text and " up" not in text
    assert "time to resume:    - (not resumed: llm queued, waiting for nodes)" in text
    whats = {e.what: e.detail for e in timeline(view)}
    assert "acknowledged" not in whats and "resumed" not in whats
    assert whats["queued"] == "plan p-1: llm stopped on every node, waiting for nodes"


def test_the_story_is_in_event_time_with_readable_instants() -> None:
    view = view_of(opened(), plan(), done(), step(T0 + 9.6, generation=1), published={"open": T0 + 3.6})
    entries = timeline(view)
    assert [e.ts for e in entries] == sorted(e.ts for e in entries)
    evidence = [e.detail for e in entries if e.what == "evidence"]
    assert evidence[0] == "rank 3 on n1: exited with signal 9"  # seen first, though listed second
    assert [e.what for e in entries][:5] == ["detected", "evidence", "evidence", "evidence", "opened"]
    text = story(view, entries)
    assert not RAW_INSTANT.search(text), text
    assert "  02:00:00.000    +0.000s  detected " in text
    assert "02:00:00.400    +0.400s  evidence " in text
    assert "no telemetry since 01:59:59.400 (-0.600s)" in text
    assert "02:00:03.600    +3.600s  on kafka " in text
    assert "02:00:09.600    +9.600s  resumed " in text
    shown = details(view)
    assert not RAW_INSTANT.search(shown.replace(str(T0), "")), shown
    lines = shown.split("evidence (UTC, from the first evidence):\n", 1)[1].splitlines()
    assert lines[0] == "  - 02:00:00.000   +0.000s  rank 3 on n1: exited with signal 9"


def test_evidence_stamps_and_instants() -> None:
    assert stamped("62.000 resolved: steps resumed") == (62.0, "resolved: steps resumed")
    assert stamped("escalated SEV3->SEV2: network") == (None, "escalated SEV3->SEV2: network")
    assert stamped("3 of 4 nodes silent") == (None, "3 of 4 nodes silent")
    assert clock(T0 + 0.0125) == "02:00:00.012"
    assert readable("median step 0.250s since 1764554401.500", T0) == \
        "median step 0.250s since 02:00:01.500 (+1.500s)"


def test_an_offset_that_rounds_to_zero_has_no_sign() -> None:
    from trainmedic.ops.incidents.evidence import offset

    assert offset(-0.0001) == "+0.000s" and offset(-0.0006) == "-0.001s" and offset(2.31) == "+2.310s"
