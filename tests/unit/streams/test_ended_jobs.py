"""Issue 44: the detector forgets a job on its nodes once the job is over there, so a fault of such a
node later is not blamed on it; a node back from a partition delivers the reports its executor held,
and those must not place a job that ended on it again. Events are fed in the order they arrive."""

from __future__ import annotations

from tests.unit.streams.events import NODES, error, exited, gpu, hb, healthy, opened, start, steps
from trainmedic.streams.core import Detector

ALIVE = NODES[:3]  # n3 is cut off at 30 s


def feed(detector: Detector, events: list) -> list:
    return [incident for event in events for incident in detector.observe(event)]


def in_order(*events: list) -> list:
    return sorted((e for batch in events for e in batch), key=lambda e: e.ts)


def flap(node: str, t: float) -> list:
    """The node's data-plane link down at `t` and up again a second later."""
    return [hb(t, node, links={"ib0": True}), hb(t + 1.0, node, links={"ib0": False}),
            hb(t + 2.0, node, links={"ib0": True})]


def test_a_job_moved_off_a_lost_node_and_ended_is_not_placed_there_again_by_its_held_reports() -> None:
    det = Detector()
    gen0 = [start(1.0, r) for r in range(8)] + steps(2.0, 30.0)
    out = feed(det, in_order(healthy(0, 30, nodes=NODES), gen0, healthy(30, 40, nodes=ALIVE)))
    [lost] = opened(out)
    assert (lost.category, lost.node, lost.job) == ("node_lost", "n3", "j")  # it ran there then
    # the coordinator moves the job to n0-n2 (generation 1), and it ends there 3 minutes before n3 is back
    moved = [exited(40.0, r, code=None, stopped=True) for r in range(6)]
    moved += [start(41.0, r, gen=1) for r in range(6)] + steps(42.0, 60.0, ranks=range(6), gen=1)
    moved += [exited(60.5, r, code=0, gen=1) for r in range(6)]
    assert opened(feed(det, in_order(moved, healthy(40, 240, nodes=ALIVE)))) == []
    assert "j" not in det.state.jobs
    # n3's link is back: its executor's held reports of generation 0 come first, then its heartbeats
    held = [error(31.0, r, "RuntimeError: NCCL watchdog timeout", node="n3") for r in (6, 7)]
    held += [exited(31.5, r, code=1, node="n3") for r in (6, 7)]
    back = feed(det, held) + feed(det, in_order(flap("n3", 240.0), healthy(240, 250, nodes=ALIVE),
                                                healthy(243, 250, nodes=["n3"])))
    assert det.state.nodes["n3"].jobs == {} and "j" not in det.state.jobs
    [link] = opened(back)
    assert (link.category, link.node, link.job, link.ranks) == ("link_flap", "n3", None, ())
    assert not any("affects job" in line for line in link.evidence)


def test_a_job_whose_every_rank_failed_is_forgotten_on_its_nodes_once_its_failure_is_decided() -> None:
    det = Detector()
    run = [start(1.0, r) for r in range(8)] + steps(2.0, 20.0)
    run += [error(20.2, 2, "RuntimeError: boom")] + [exited(20.5, r, code=1) for r in range(8)]
    [failed] = opened(feed(det, in_order(healthy(0, 60, nodes=NODES), run)))
    assert (failed.job, failed.category) == ("j", "software_error")
    assert all(node.jobs == {} for node in det.state.nodes.values())
    late = [error(20.3, 5, "RuntimeError: peer gone")]  # a report of the generation that is over
    assert feed(det, late + flap("n1", 60.0)) and det.state.nodes["n2"].jobs == {}
    [link] = [i for i in det.state.incidents.values() if i.category == "link_flap"]
    assert link.job is None  # the coordinator gave up on j: its nodes' faults are theirs


def test_a_job_whose_failure_a_hardware_fault_took_over_is_not_blamed_for_a_later_one() -> None:
    det = Detector()
    run = [start(1.0, r) for r in range(8)] + steps(2.0, 20.0)
    run += [exited(20.5, r, code=None, signal=6) for r in range(8)]  # aborted: held for a GPU's word
    xid = gpu(20.6, "n1", 0, xids=(79,))  # their root cause
    out = feed(det, in_order(healthy(0, 60, nodes=NODES), run, [xid]))
    [fault] = opened(out)
    assert (fault.category, fault.node, fault.job) == ("gpu_lost", "n1", "j")
    [link] = opened(feed(det, flap("n2", 60.0)))  # the coordinator gave up on j long since
    assert (link.job, link.ranks) == (None, ())


def test_the_job_submitted_again_is_followed_from_its_start() -> None:
    det = Detector()
    run = [start(1.0, r) for r in range(8)] + steps(2.0, 20.0) + [exited(20.5, r, code=1) for r in range(8)]
    feed(det, in_order(healthy(0, 30, nodes=NODES), run))
    assert det.state.ended == {"j": 0}
    again = [start(31.0, r) for r in range(8)] + steps(32.0, 40.0)
    feed(det, in_order(healthy(30, 40, nodes=NODES), again))
    assert det.state.nodes["n1"].jobs == {"j": [2, 3]} and det.state.ended == {}
    [link] = opened(feed(det, flap("n1", 40.0)))
    assert (link.job, link.ranks) == ("j", (2, 3))


def test_ended_jobs_are_remembered_in_a_checkpoint() -> None:
    det = Detector()
    run = [start(1.0, r) for r in range(8)] + [exited(5.0, r, code=0) for r in range(8)]
    feed(det, in_order(healthy(0, 10, nodes=NODES), run))
    assert det.state.ended == {"j": 0}
    restored = Detector(state=type(det.state).from_dict(det.state.to_dict()))
    assert restored.state.ended == {"j": 0}
    assert feed(restored, [error(4.0, 6, "RuntimeError: late", node="n3")]) == []
    assert "j" not in restored.state.jobs
    before = det.state.to_dict()  # as a checkpoint before format 7 holds it
    del before["ended"]
    assert type(det.state).from_dict(before).ended == {}
