"""What the coordinator does for a new job and for each severity: actions, generations, nodes, restore."""

from __future__ import annotations

from tests.unit.coordinator.world import Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import JobState, estimate_mtbf
from trainmedic.schemas import RestoreSource


def by_node(events: list) -> dict:
    return {c.node: c for c in of_type(events, "command")}


def test_a_new_job_starts_on_its_nodes_at_generation_0() -> None:
    rec = Recorder()
    out = rec.feed(submitted(), now=5.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.generation, plan.incident_id) == ("start", 0, None)
    assert plan.nodes == ("n1", "n2", "n3")
    commands = by_node(out)
    assert sorted(commands) == ["n1", "n2", "n3"]
    n2 = commands["n2"]
    assert (n2.action, n2.generation, n2.plan_id, n2.job, n2.ts, n2.signature) == (
        "start", 0, plan.plan_id, "llm", 5.0, None)
    assert n2.worker.ranks == (2, 3) and n2.worker.world_size == 6
    assert n2.worker.master_addr == "n1" and 29600 <= n2.worker.master_port < 29600 + 1024  # its generation's
    assert n2.worker.rendezvous_key is not None
    assert n2.worker.command == ("python", "train.py") and n2.worker.checkpoint_dir == "/ckpt/llm"
    # A new submission starts at step 0, whatever an earlier one of the id left in /ckpt/llm; its
    # ranks' files and checkpoints are its own, named by it.
    assert n2.worker.restore == RestoreSource(kind="none") and n2.worker.resume is None
    assert {c.worker.submission for c in commands.values()} == {submitted().submission}
    assert rec.state.jobs["llm"].state is JobState.STARTING


def test_a_job_that_asks_to_resume_starts_from_a_checkpoint_and_carries_where_from() -> None:
    rec = Recorder()
    out = rec.feed(submitted(resume="latest"), now=5.0)
    commands = by_node(out)
    assert {c.worker.restore for c in commands.values()} == {RestoreSource(kind="checkpoint")}
    assert {c.worker.resume for c in commands.values()} == {"latest"}


def test_two_submissions_of_one_job_id_are_named_apart_and_by_time() -> None:
    first, again = submitted(), submitted(ts=0.002)
    assert first.submission != again.submission and first.submission < again.submission
    assert first.submission == submitted().submission  # one record, one name, however often folded
    assert first.submission.startswith("19700101T000000.000Z-")
    assert again.submission.startswith("19700101T000000.002Z-")


def test_a_job_whose_node_is_busy_is_not_started_and_says_why() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(submitted("other", nodes=("n3", "n4")), now=9.0)
    [skip] = out
    assert skip.type == "recovery_skipped" and "node n3 runs job llm" in skip.reason
    assert rec.feed(submitted("other", nodes=("n3", "n4")), now=10.0) == []  # decided once


def test_sev3_reattempts_in_place_at_the_same_generation() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i3", "SEV3", node="n2"), now=60.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.generation, plan.incident_id) == ("reattempt", 0, "i3")
    commands = by_node(out)
    assert {(n, c.action, c.generation) for n, c in commands.items()} == {
        ("n1", "reattempt", 0), ("n2", "reattempt", 0), ("n3", "reattempt", 0)}
    assert rec.state.jobs["llm"].state is JobState.RECOVERING


def test_sev3_on_a_job_that_is_not_running_is_skipped() -> None:
    rec = Recorder()
    rec.feed(submitted(), now=1.0)  # still starting
    [skip] = rec.feed(incident("i3", "SEV3", node="n2"), now=2.0)
    assert skip.type == "recovery_skipped" and "starting" in skip.reason


def test_sev2_restarts_every_node_at_the_next_generation_restoring_from_a_survivor() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n2", ranks=(2,)), now=60.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.generation, plan.nodes) == ("restart", 1, ("n1", "n2", "n3"))
    commands = by_node(out)
    assert {c.action for c in commands.values()} == {"restart"}
    assert {c.generation for c in commands.values()} == {1}
    assert commands["n2"].worker.restore == RestoreSource(kind="replica", node="n1")
    assert commands["n1"].worker.restore == RestoreSource(kind="replica", node="n1")  # its own
    assert commands["n3"].worker.restore == RestoreSource(kind="replica", node="n3")
    assert rec.state.nodes["n2"].healthy  # a restart isolates nothing


def test_sev2_with_no_survivor_restores_the_newest_snapshot_of_any_node() -> None:
    """A process fault leaves every node's disk: a hang of every rank restores from the snapshots
    they saved, not (silently, steps lost) from an older checkpoint; each rank also offers the
    checkpoint, for when no snapshot is whole."""
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("hang", "SEV2", ranks=tuple(range(6))), now=60.0)
    assert {c.worker.restore for c in of_type(out, "command")} == {RestoreSource(kind="replica")}


def test_sev2_without_a_job_finds_the_job_on_its_node() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n3", job=None), now=60.0)
    assert [p.job for p in of_type(out, "recovery_planned")] == ["llm"]
    [skip] = rec.feed(incident("i2b", "SEV2", node="n5", job=None), now=61.0)
    assert "no running job known for node n5" in skip.reason


def test_sev1_isolates_the_node_and_moves_the_job_by_the_plan() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i1", "SEV1", node="n2"), now=100.0)
    assert not rec.state.nodes["n2"].healthy
    [plan] = of_type(out, "recovery_planned")
    # the planner keeps size 3: n1 and n3 stay, n4 joins (first spare by switch hops and id)
    assert (plan.kind, plan.generation, plan.nodes, plan.previous) == (
        "reconfigure", 1, ("n1", "n3", "n4"), ("n1", "n2", "n3"))
    assert plan.horizon_s == estimate_mtbf(rec.state, 100.0)
    commands = by_node(out)
    assert {(n, c.action, c.generation) for n, c in commands.items()} == {
        ("n2", "stop", 1), ("n1", "restart", 1), ("n3", "restart", 1), ("n4", "start", 1)}
    assert commands["n2"].worker is None
    n4 = commands["n4"].worker
    assert (n4.ranks, n4.world_size, n4.master_addr) == ((4, 5), 6, "n1")
    # the nearest survivor: n1 and n3 are equally near, the smaller id wins
    assert n4.restore == RestoreSource(kind="replica", node="n1")
    assert commands["n3"].worker.restore == RestoreSource(kind="replica", node="n3")  # its own first


def test_sev1_shrinks_the_job_when_no_spare_node_is_left() -> None:
    rec = Recorder()
    rec.started()
    for i, spare in enumerate(("n4", "n5", "n6")):
        rec.feed(incident(f"spare-{spare}", "SEV1", node=spare, job=None), now=10.0 + i)
    out = rec.feed(incident("i1", "SEV1", node="n1"), now=100.0)
    [plan] = of_type(out, "recovery_planned")
    assert plan.nodes == ("n2", "n3")
    n2 = by_node(out)["n2"]
    assert (n2.worker.ranks, n2.worker.world_size, n2.worker.master_addr) == ((0, 1), 4, "n2")


def test_a_sev1_on_a_node_no_job_uses_is_recorded_as_skipped() -> None:
    rec = Recorder()
    rec.started()
    [skip] = rec.feed(incident("i1", "SEV1", node="n5", job=None), now=100.0)
    assert skip.type == "recovery_skipped" and "n5 isolated" in skip.reason
    assert not rec.state.nodes["n5"].healthy


def test_warn_and_resolved_incidents_need_no_action() -> None:
    rec = Recorder()
    rec.started()
    assert rec.feed(incident("w", "WARN", node="n1"), now=60.0) == []
    assert rec.feed(incident("r", "SEV2", node="n1", status="resolved"), now=61.0) == []


def test_the_same_incident_twice_gives_one_plan() -> None:
    rec = Recorder()
    rec.started()
    first = rec.feed(incident("i1", "SEV1", node="n2"), now=100.0)
    again = rec.feed(incident("i1", "SEV1", node="n2"), now=101.0)
    assert len(of_type(first, "recovery_planned")) == 1 and again == []
    assert len(of_type(rec.log, "recovery_planned")) == 2  # the start and this one


def test_every_node_of_a_later_generation_restores_even_a_newcomer_of_a_job_without_checkpoints() -> None:
    """A node that joins with no source named, in a job with no checkpoint dir, used to get `none`
    and skip the restore's collectives the other ranks entered (a hang until their timeout)."""
    from trainmedic.recovery.coordinator.core.commands import commands_for
    from trainmedic.schemas.recovery import RecoveryKind, RecoveryPlanned

    rec = Recorder()
    rec.feed(submitted(checkpoint_dir=None), now=1.0)
    plan = RecoveryPlanned(ts=2.0, plan_id="p", job="llm", kind=RecoveryKind.RECONFIGURE, generation=1,
                           nodes=("n1", "n2", "n4"), previous=("n1", "n2", "n3"), restore={})
    restore = {c.node: c.worker.restore for c in commands_for(rec.state, plan, 2.0) if c.worker}
    assert restore == {"n1": RestoreSource(kind="replica", node="n1"),
                       "n2": RestoreSource(kind="replica", node="n2"), "n4": RestoreSource(kind="replica")}
