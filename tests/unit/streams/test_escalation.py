from __future__ import annotations

import pytest

from tests.unit.streams.events import error, exited, hb, healthy, start, step
from trainmedic.schemas.incident import Severity
from trainmedic.streams.core import Detector
from trainmedic.streams.core.config import EscalationConfig
from trainmedic.streams.core.escalation import escalate
from trainmedic.streams.core.state import DetectorState
from trainmedic.streams.core.taxonomy import error_signature

CFG = EscalationConfig()
S1, S2, S3 = Severity.SEV1, Severity.SEV2, Severity.SEV3
BUG = error_signature("software_error", "ValueError: bad label -1 in batch 5")


def _open(state, ts, severity, category="network", scope="job-a", node=None, job=None,
          signature=None):
    return escalate(CFG, state, category, severity, scope=scope, node=node, job=job,
                    signature=signature, ts=ts)


def _series(times, severity, node=None, scope="job-a", category="network"):
    state = DetectorState()
    return [_open(state, ts, severity, category, scope, node)[0] for ts in times]


def test_third_sev3_on_a_job_within_ten_minutes_is_sev2():
    assert _series([0, 100, 200], S3) == [S3, S3, S2]
    assert _series([0, 300, 601], S3) == [S3, S3, S3]  # the first fell out of the window


def test_sev3_counts_per_category_and_job():
    state = DetectorState()
    got = [_open(state, ts, S3, cat, job)[0]
           for ts, cat, job in [(0, "network", "a"), (1, "link_flap", "a"), (2, "network", "b"),
                                (3, "network", "a")]]
    assert got == [S3] * 4


def test_second_sev2_on_the_same_node_within_thirty_minutes_is_sev1():
    assert _series([0, 1700], S2, node="n1", category="cuda_error") == [S2, S1]
    assert _series([0, 1801], S2, node="n1", category="cuda_error") == [S2, S2]
    assert _series([0, 10], S2, node=None, category="nccl_error") == [S2, S2]  # no root-cause node


def test_link_flaps_of_one_episode_stay_sev3():
    """One switch reboot: three flaps within two minutes are one episode, counted once."""
    assert _series([0, 60, 120], S3, node="n1", category="link_flap") == [S3, S3, S3]
    assert _series([0, 60, 120, 179.9], S3, node="n1", category="link_flap") == [S3] * 4


def test_link_flapping_that_persists_across_episodes_escalates():
    """Episodes start at 0, 180 and 360 s: the third within ten minutes is SEV2, a flap of that
    episode is not counted again, and the fourth episode is the node's second SEV2: SEV1."""
    got = _series([0, 60, 180, 300, 360, 400, 540], S3, node="n1", category="link_flap")
    assert got == [S3, S3, S3, S3, S2, S3, S1]


def test_link_flaps_on_several_nodes_of_a_job_in_one_episode_count_once():
    state = DetectorState()
    got = [_open(state, ts, S3, "link_flap", "job-a", node)[0]
           for ts, node in [(0, "n1"), (2, "n2"), (3, "n3"), (40, "n1")]]
    assert got == [S3] * 4


def test_a_job_failing_the_same_way_every_generation_never_blames_the_node():
    state = DetectorState()
    got = [_open(state, ts, S2, "software_error", "job-a", "n0", "job-a", BUG)
           for ts in (0, 30, 60, 90)]
    assert [severity for severity, _ in got] == [S2] * 4
    assert got[0][1] == []
    assert got[1][1] == [f"follows job job-a: failed the same way at 0.000 on n0 ({BUG}); "
                         "the job's failure, not counted against a node"]
    assert state.sev2_history == {"n0": []}  # the first failure is the job's too, now


def test_the_same_error_after_a_move_follows_the_job():
    state = DetectorState()
    got = [_open(state, ts, S2, "software_error", "job-a", node, "job-a", BUG)[0]
           for ts, node in [(0, "n0"), (30, "n2"), (60, "n0"), (90, "n3")]]
    assert got == [S2] * 4
    assert state.sev2_history == {"n0": [], "n2": [], "n3": []}


def test_a_job_s_bug_is_not_held_against_the_node_when_another_job_fails_there():
    """job-a's repeated bug is the job's; job-b failing once on n0 afterwards is its first."""
    state = DetectorState()
    for ts in (0, 30):
        _open(state, ts, S2, "software_error", "job-a", "n0", "job-a", BUG)
    other = error_signature("cuda_error", "RuntimeError: CUDA error: unspecified launch failure")
    assert _open(state, 60, S2, "cuda_error", "job-b", "n0", "job-b", other)[0] is S2


def test_two_jobs_failing_the_same_way_on_one_node_blame_the_node():
    state = DetectorState()
    assert _open(state, 0, S2, "software_error", "job-a", "n0", "job-a", BUG)[0] is S2
    severity, lines = _open(state, 50, S2, "software_error", "job-b", "n0", "job-b", BUG)
    assert severity is S1
    assert lines == ["escalated SEV2->SEV1: SEV2 #2 on node n0 within 1800s"]


def test_different_failures_of_one_job_on_one_node_still_blame_the_node():
    """Generations that fail there in different ways correlate with the node, not the job."""
    state = DetectorState()
    ima = error_signature("cuda_error", "RuntimeError: CUDA error: an illegal memory access")
    launch = error_signature("cuda_error", "RuntimeError: CUDA error: unspecified launch failure")
    assert _open(state, 0, S2, "cuda_error", "job-a", "n1", "job-a", ima)[0] is S2
    assert _open(state, 60, S2, "cuda_error", "job-a", "n1", "job-a", launch)[0] is S1


def test_escalated_link_flaps_count_against_the_node_whatever_the_job():
    state = DetectorState()
    _open(state, 0, S2, "software_error", "job-a", "n1", "job-a", BUG)
    severity, _ = _open(state, 10, S2, "link_flap", "job-a", "n1", "job-a", None)
    assert severity is S1


def test_escalation_says_why():
    state = DetectorState()
    for ts in (0, 1):
        _open(state, ts, S3, "network", "a")
    _, lines = _open(state, 2, S3, "network", "a")
    assert lines == ["escalated SEV3->SEV2: network #3 on a within 600s"]


def test_error_signature_masks_what_changes_between_runs():
    assert error_signature("software_error", "ValueError: bad label -1 in batch 5\n  at x.py:3") == \
        "software_error: ValueError: bad label -# in batch #"
    assert error_signature("cuda_error", "RuntimeError: ptr 0x7f3a12 bad") == \
        "cuda_error: RuntimeError: ptr # bad"
    assert error_signature("software_error", "") == "software_error: "


def test_episode_config_must_leave_room_for_separate_episodes():
    with pytest.raises(ValueError, match="episode_s x"):
        EscalationConfig(episode_s=300.0)
    assert EscalationConfig(episode_s=299.0).episode_s == 299.0


def _generation(gen, t0, text):
    """Job j (8 ranks on n0..n3) starts, steps, and rank 0 raises `text` and exits."""
    out = [start(t0, r, gen=gen) for r in range(8)]
    out += [step(t0 + 1 + s, r, s, gen=gen) for s in range(3) for r in range(8)]
    return out + [error(t0 + 4.5, 0, text, gen=gen), exited(t0 + 4.6, 0, gen=gen)]


def test_detector_a_value_error_every_generation_is_sev2_every_time():
    det, got = Detector(), []
    events = healthy(0, 45)
    for gen, t0 in enumerate((1, 11, 21, 31)):
        events += _generation(gen, t0, f"ValueError: bad label -{gen} in batch {gen * 7}")
    for ev in sorted(events, key=lambda e: e.ts):
        got += det.observe(ev)
    opened = [(i.category, i.severity.value, i.node, round(i.ts, 3)) for i in got
              if i.status.value == "open"]
    assert opened == [("software_error", "SEV2", "n0", t) for t in (6.5, 16.5, 26.5, 36.5)]


def test_detector_a_flapping_link_escalates_only_after_separate_episodes():
    """ib0 of n1 flaps at 10, 70, 130 s (one episode), then at 200 and 400 s: the fifth
    flap is the third episode within ten minutes: SEV2."""
    det, got = Detector(), []
    downs = (10, 70, 130, 200, 400)
    for t in range(0, 440):
        got += det.observe(hb(float(t), "n1", links={"ib0": t not in downs}))
    opened = [(i.severity.value, i.ts) for i in got
              if i.status.value == "open" and i.category == "link_flap"]
    assert opened == [("SEV3", 11.0), ("SEV3", 71.0), ("SEV3", 131.0), ("SEV3", 201.0),
                      ("SEV2", 401.0)]


def test_a_job_s_signatures_are_forgotten_once_they_leave_the_window():
    state = DetectorState()
    _open(state, 0, S2, "software_error", "job-a", "n0", "job-a", BUG)
    _open(state, 100, S2, "software_error", "job-b", "n1", "job-b", BUG)
    assert set(state.job_errors) == {"job-a", "job-b"}
    assert _open(state, 1801, S2, "software_error", "job-a", "n0", "job-a", BUG)[0] is S2
    assert state.job_errors == {"job-a": [[1801, "n0", BUG]], "job-b": [[100, "n1", BUG]]}
    _open(state, 1901, S2, "software_error", "job-c", "n2", "job-c", BUG)
    assert set(state.job_errors) == {"job-a", "job-c"}
