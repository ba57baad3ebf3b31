"""Failure traces: the published mixes, the Poisson generator's rate, shares and repairs against their
expectations within Monte Carlo error (4 sigma), and the replay of a recorded incident log."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.unit.ops.incident_log import recorded
from trainmedic.schemas import Incident, IncidentStatus, Severity
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.scenario import FailureModel
from trainmedic.simulate.traces import MIXES, from_incident_log, generate
from trainmedic.streams.core.taxonomy import CATEGORIES

DAY_S = 86_400.0


def cluster(n: int) -> list[str]:
    return [f"node{i:05d}" for i in range(n)]


@pytest.mark.parametrize("name", MIXES)
def test_every_cause_of_a_mix_is_a_failure_category_of_the_taxonomy(name):
    for cause in MIXES[name].causes:
        assert cause.category in CATEGORIES, (name, cause.label)
        assert CATEGORIES[cause.category].severity is not Severity.WARN, (name, cause.label)
        assert cause.weight > 0


@pytest.mark.parametrize("name", MIXES)
def test_shares_are_normalised(name):
    assert sum(MIXES[name].shares) == pytest.approx(1.0)


def test_the_mixes_carry_their_sources_figures():
    llama3 = MIXES["llama3"]
    assert sum(cause.weight for cause in llama3.causes) == 419
    assert llama3.mttf_gpu_h == pytest.approx(54 * 24 * 16_384 / 419)  # 50,677 GPU-hours
    rsc_8, rsc_1024 = 47.7 * 24 * 8, 7.9 * 1024  # GPU-hours per failure at either job size
    assert abs(rsc_8 / rsc_1024 - 1) < 0.15  # a rate linear in GPUs fits both
    assert MIXES["meta-rsc"].mttf_gpu_h == pytest.approx(rsc_1024)
    assert MIXES["meta-rsc"].causes == llama3.causes
    unicron = MIXES["unicron"]
    assert sum(s for c, s in zip(unicron.causes, unicron.shares, strict=True) if c.breaks_node) == 0.5


def within_poisson(observed: int, expected: float) -> bool:
    return abs(observed - expected) <= 4 * math.sqrt(expected)


def test_a_llama3_trace_fails_at_the_llama3_rate_scaled_to_the_cluster():
    faults = generate(FailureModel(mix="llama3"), cluster(2048), 8, 30 * DAY_S, random.Random(1))
    expected = 419 * (30 / 54) * (2048 * 8 / 16_384)  # 232.8
    assert within_poisson(len(faults), expected), len(faults)
    many = sum(len(generate(FailureModel(mix="llama3"), cluster(2048), 8, 30 * DAY_S, random.Random(seed)))
               for seed in range(40))
    assert within_poisson(many, 40 * expected), many


def test_the_scenario_mttf_and_rate_scale_override_the_mix_rate():
    model = FailureModel(mix="llama3", mttf_gpu_h=1000.0, rate_scale=2.5)
    faults = generate(model, cluster(100), 4, 10 * DAY_S, random.Random(2))
    expected = 100 * 4 / (1000.0 * 3600) * 2.5 * 10 * DAY_S  # 2,400
    assert within_poisson(len(faults), expected), len(faults)


@pytest.mark.parametrize("name", MIXES)
def test_causes_are_drawn_by_their_share(name):
    mix = MIXES[name]
    faults = generate(FailureModel(mix=name, mttf_gpu_h=10.0), cluster(100), 8, 30 * DAY_S, random.Random(3))
    counts = Counter(fault.cause for fault in faults)
    n = len(faults)
    assert n > 50_000
    for cause, share in zip(mix.causes, mix.shares, strict=True):
        sigma = math.sqrt(n * share * (1 - share))
        assert abs(counts[cause.label] - n * share) <= 4 * sigma, (cause.label, counts[cause.label])
        assert all(f.category == cause.category for f in faults if f.cause == cause.label)


def test_nodes_are_drawn_uniformly():
    faults = generate(FailureModel(mttf_gpu_h=10.0), cluster(8), 8, 30 * DAY_S, random.Random(4))
    counts = Counter(fault.node for fault in faults)
    assert set(counts) == set(cluster(8))
    share = 1 / 8
    sigma = math.sqrt(len(faults) * share * (1 - share))
    assert all(abs(c - len(faults) * share) <= 4 * sigma for c in counts.values()), counts


def test_faults_that_break_the_node_are_repaired_in_repair_h_on_average():
    model = FailureModel(mix="unicron", mttf_gpu_h=10.0, repair_h=6.0)
    faults = generate(model, cluster(100), 8, 10 * DAY_S, random.Random(5))
    breaking = {c.label for c in MIXES["unicron"].causes if c.breaks_node}
    broken = [f.repair_s for f in faults if f.cause in breaking]
    assert all(r > 0 for r in broken)
    assert all(f.repair_s == 0 for f in faults if f.cause not in breaking)
    mean_s = 6.0 * 3600
    sigma = mean_s / math.sqrt(len(broken))  # an exponential's standard deviation is its mean
    assert abs(sum(broken) / len(broken) - mean_s) <= 4 * sigma


def test_a_trace_is_sorted_in_its_span_and_the_same_for_a_seed():
    def trace(seed: int) -> list[Fault]:
        return generate(FailureModel(mix="meta-rsc"), cluster(512), 8, 30 * DAY_S, random.Random(seed))

    faults = trace(7)
    assert faults == sorted(faults, key=lambda f: f.ts)
    assert faults[0].ts > 0 and faults[-1].ts < 30 * DAY_S
    assert trace(7) == faults
    assert trace(8) != faults


def test_an_unknown_mix_or_an_empty_cluster_is_refused():
    with pytest.raises(ValueError, match="unknown failure mix 'nope'; known: llama3"):
        generate(FailureModel(mix="nope"), cluster(4), 8, DAY_S, random.Random(0))
    with pytest.raises(ValueError, match="at least one node"):
        generate(FailureModel(), [], 8, DAY_S, random.Random(0))


REAL_CATEGORY = {"hang-2": "hang", "xid-3": "gpu_ecc", "warm-4": "straggler"}


def incident_log(tmp_path, extra: Sequence[Incident] = ()) -> tuple[Path, list]:
    """The recorded log of the coordinator's core (tests/unit/ops/incident_log.py) as `trainmedic
    incidents export` writes it, with taxonomy categories, a blank line, and `extra` incidents."""
    events = [e.model_copy(update={"category": REAL_CATEGORY[e.id]}) if getattr(e, "id", "") in REAL_CATEGORY
              else e for e in recorded()]
    path = tmp_path / "incidents.jsonl"
    path.write_text("\n".join(e.model_dump_json() for e in [*events, *extra]) + "\n\n")
    return path, events


def opened(id: str, category: str, first_ts: float, *, node: str | None = None, job: str | None = "llm",
           severity: str | None = None) -> Incident:
    severity = severity or CATEGORIES[category].severity
    return Incident(ts=first_ts + 5, id=id, status=IncidentStatus.OPEN, category=category, severity=severity,
                    action=CATEGORIES[category].action if category in CATEGORIES else "alert", job=job,
                    node=node, first_ts=first_ts)


def test_an_incident_log_replays_each_detected_fault_once_from_its_first_evidence(tmp_path):
    extra = [
        opened("nccl-5", "nccl_error", 70.0),  # names no node: lands where its job's id hashes to
        opened("gap-6", "telemetry_gap", 71.0, job=None),
        opened("net-7", "network", 72.0, job=None),  # neither node nor job: nowhere to put it
        opened("mass-8", "mass_failure", 73.0, node="n2", severity="SEV1"),
        opened("new-9", "some_future_category", 74.0, node="n2", severity="SEV2"),
        opened("nccl-5", "nccl_error", 75.0),  # published again, with more evidence: the same fault
    ]
    path, events = incident_log(tmp_path, extra)
    first = {e.id: e for e in reversed(events) if e.type == "incident"}
    start = first["net-1"].first_ts
    skipped = Counter()
    nodes = ["n1", "n2", "n3", "n4"]
    faults = from_incident_log(path, nodes, repair_h=2.0, rng=random.Random(0), skipped=skipped)

    assert [(f.ts, f.node, f.category, f.breaks_node) for f in faults] == [
        (0.0, "n1", "network", False),
        (first["hang-2"].first_ts - start, "n2", "hang", False),
        (first["xid-3"].first_ts - start, "n3", "gpu_ecc", True),
        (70.0 - start, faults[3].node, "nccl_error", False),
    ]
    assert faults[3].node in nodes
    assert all(f.cause == f.category for f in faults)
    assert skipped == {"not an incident": 8, "resolved or repeated": 2, "the coordinator's own": 2,
                       "warning": 2, "no node and no job": 1, "unknown category": 1}
    again = from_incident_log(path, nodes, repair_h=2.0, rng=random.Random(0))
    assert again == faults


def test_a_log_of_another_cluster_lands_on_this_one_the_same_way_every_time(tmp_path):
    far = [opened(f"ecc-{i}", "gpu_ecc", 100.0 + i, node=f"far-{i}") for i in range(50)]
    path, _ = incident_log(tmp_path, far)
    nodes = cluster(16)
    faults = from_incident_log(path, nodes, repair_h=2.0, rng=random.Random(0))
    assert len(faults) == 3 + 50 and all(f.node in nodes for f in faults)
    assert len({f.node for f in faults}) > 8  # spread over the cluster, not piled on one node
    assert [f.node for f in from_incident_log(path, nodes, repair_h=2.0, rng=random.Random(9))] == [
        f.node for f in faults]
    assert all(f.breaks_node for f in faults if f.category == "gpu_ecc")


def test_a_line_that_is_not_json_is_an_error_naming_it(tmp_path):
    path = tmp_path / "incidents.jsonl"
    path.write_text(opened("net-1", "network", 1.0, node="n1").model_dump_json() + "\n\n{\"type\": \"inc\n")
    with pytest.raises(ValueError, match=r"incidents.jsonl:3: not JSON"):
        from_incident_log(path, ["n1"], repair_h=1.0, rng=random.Random(0))
    path.write_text('{"type": "incident", "id": "x"}\n')
    with pytest.raises(ValueError, match=r"incidents.jsonl:1: not a valid incident"):
        from_incident_log(path, ["n1"], repair_h=1.0, rng=random.Random(0))
