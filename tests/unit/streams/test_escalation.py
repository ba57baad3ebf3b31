from __future__ import annotations

from schemas.incident import Severity
from streams.core.config import EscalationConfig
from streams.core.escalation import escalate

CFG = EscalationConfig()


def _series(times, severity, node=None, scope="job-a", category="network"):
    sev3, sev2, out = {}, {}, []
    for ts in times:
        out.append(escalate(CFG, sev3, sev2, category, severity, scope, node, ts)[0])
    return out


def test_third_sev3_on_a_job_within_ten_minutes_is_sev2():
    S3, S2 = Severity.SEV3, Severity.SEV2
    assert _series([0, 100, 200], S3) == [S3, S3, S2]
    assert _series([0, 300, 601], S3) == [S3, S3, S3]  # the first fell out of the window


def test_sev3_counts_per_category_and_job():
    sev3, sev2 = {}, {}
    got = [escalate(CFG, sev3, sev2, cat, Severity.SEV3, job, None, ts)[0]
           for ts, cat, job in [(0, "network", "a"), (1, "link_flap", "a"), (2, "network", "b"),
                                (3, "network", "a")]]
    assert got == [Severity.SEV3] * 4


def test_second_sev2_on_the_same_node_within_thirty_minutes_is_sev1():
    S2, S1 = Severity.SEV2, Severity.SEV1
    assert _series([0, 1700], S2, node="n1") == [S2, S1]
    assert _series([0, 1801], S2, node="n1") == [S2, S2]
    assert _series([0, 10], S2, node=None) == [S2, S2]  # no root-cause node, no node history


def test_escalated_sev3_counts_towards_the_node():
    got = _series([0, 10, 20, 30, 40, 50], Severity.SEV3, node="n1", category="link_flap")
    assert got[:3] == [Severity.SEV3, Severity.SEV3, Severity.SEV2]
    assert got[3] == Severity.SEV1


def test_escalation_says_why():
    sev3, sev2 = {}, {}
    for ts in (0, 1):
        escalate(CFG, sev3, sev2, "network", Severity.SEV3, "a", None, ts)
    _, lines = escalate(CFG, sev3, sev2, "network", Severity.SEV3, "a", None, 2)
    assert lines == ["escalated SEV3->SEV2: network #3 on a within 600s"]
