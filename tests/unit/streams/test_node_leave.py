"""A planned shutdown is not a fault: after a heartbeat marked `leaving`, the node's silence is no
node_lost and no telemetry gap, and its ranks' exits are no failure; heartbeats that resume
unmarked make it watched again."""

from __future__ import annotations

from tests.unit.streams.events import error, exited, hb, healthy, opened, run, start, steps
from trainmedic.streams.core import Detector, DetectorState

TEN = [f"n{i}" for i in range(10)]


def leave(ts: float, node: str = "n0"):
    return hb(ts, node).model_copy(update={"leaving": True})


def test_a_node_silent_after_it_said_it_leaves_is_not_lost():
    out, _ = run(healthy(0, 30, nodes=TEN) + [leave(30.5)] + healthy(30, 90, nodes=TEN[1:]))
    assert out == []


def test_the_same_silence_unannounced_is_node_lost():  # the control: the leave flag is what differs
    out, _ = run(healthy(0, 30, nodes=TEN) + [hb(30.5, "n0")] + healthy(30, 90, nodes=TEN[1:]))
    assert [(i.category, i.node) for i in opened(out)] == [("node_lost", "n0")]


def test_three_nodes_leaving_at_once_are_no_telemetry_gap():
    three = TEN[:3]
    events = healthy(0, 30, nodes=TEN) + [leave(30.5, n) for n in three] + healthy(30, 200, nodes=TEN[3:])
    assert run(events)[0] == []


def test_a_node_back_from_its_leave_is_watched_again():
    events = (healthy(0, 30, nodes=TEN) + [leave(30.5)] + healthy(30, 60, nodes=TEN[1:])
              + healthy(60, 70, nodes=TEN) + healthy(70, 100, nodes=TEN[1:]))
    out, _ = run(events)
    [lost] = opened(out)
    assert (lost.category, lost.node) == ("node_lost", "n0") and lost.first_ts > 69


def test_the_ranks_of_a_leaving_node_ending_are_no_failure():
    ranks = range(4)  # ranks 0-1 on n0, 2-3 on n1
    events = (healthy(0, 30, nodes=TEN) + [start(1.0, r) for r in ranks] + steps(2, 30, ranks=ranks)
              + [leave(30.5)] + [exited(31.0, r, code=None, signal=15) for r in (0, 1)]
              + healthy(30, 60, nodes=TEN[1:])
              + [exited(32.0, r, code=None, signal=15, stopped=True) for r in (2, 3)])  # the re-plan's stop
    assert run(events)[0] == []


def test_a_checkpoint_from_before_the_leave_flag_loads():
    _, detector = run(healthy(0, 5, nodes=TEN[:2]), drain=False)
    saved = detector.state.to_dict()
    for node in saved["nodes"].values():
        del node["leaving"]
    restored = DetectorState.from_dict(saved)
    assert not restored.nodes["n0"].leaving
    again = Detector(state=restored)
    assert [(i.category, i.node) for i in again.advance(30.0)] == [("node_lost", "n0"), ("node_lost", "n1")]


GLOO_RESET = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
              "[127.0.0.1]:26334: Connection reset by peer")


def test_a_peer_reset_by_the_planned_stop_is_no_failure():
    """The re-plan stops the leaving node's ranks first: the others' collective fails before their own
    stop reaches them. Every rank of the generation ends stopped for the plan: no incident."""
    ranks = range(4)
    events = (healthy(0, 40, nodes=TEN) + [start(1.0, r) for r in ranks] + steps(2, 30, ranks=ranks)
              + [leave(30.2)]
              + [exited(30.5, r, code=None, signal=15, stopped=True) for r in (0, 1)]
              + [error(30.4, r, GLOO_RESET) for r in (2, 3)]  # before the stop's exit is published
              + [exited(30.6, r, code=None, signal=15, stopped=True) for r in (2, 3)])
    assert run(events)[0] == []


def test_a_rank_that_failed_by_itself_before_the_stop_is_still_a_failure():
    ranks = range(4)
    events = (healthy(0, 40, nodes=TEN) + [start(1.0, r) for r in ranks] + steps(2, 30, ranks=ranks)
              + [error(30.1, 2, "ValueError: a bug"), exited(30.2, 2, code=1)]
              + [exited(30.5, r, code=None, signal=15, stopped=True) for r in (0, 1, 3)])
    assert [i.category for i in opened(run(events)[0])] == ["software_error"]
