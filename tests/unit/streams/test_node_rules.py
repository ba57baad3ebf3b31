"""Hosts and GPUs: counters, Xids, silence, lost nodes, link flaps, heat."""

from __future__ import annotations

from tests.unit.streams.events import error, gpu, hb, healthy, opened, run, start, steps
from trainmedic.streams.core import Detector, DetectorConfig, GpuConfig, HeartbeatConfig


def _counter_series(values, field="ecc_dbe"):
    return [gpu(10.0 + n, **{field: v}) for n, v in enumerate(values)]


def test_counters_use_increments_not_absolute_values():
    # first sample is a baseline however high; None keeps the baseline; a drop is a reset
    out, _ = run(_counter_series([7, 7, None, 7, 2, 2, 2]))
    assert out == []
    out, _ = run(_counter_series([7, 7, None, 8]))
    assert [(i.category, i.severity, i.ts, i.node) for i in out] == [
        ("gpu_ecc", "SEV1", 13.0, "n0")]
    out, _ = run(_counter_series([3, 0, 1], field="nvlink_errors"))
    assert [(i.category, i.ts) for i in out] == [("nvlink", 12.0)]


def test_hardware_xid_is_decided_at_once_and_names_the_job_and_ranks_on_the_node():
    events = [start(1.0, r) for r in range(8)] + [gpu(20.0, "n1", 1, xids=(48,))]
    (incident,), _ = run(events)
    assert (incident.category, incident.node, incident.job, incident.ranks) == (
        "gpu_ecc", "n1", "j", (2, 3))
    assert incident.ts == incident.first_ts == 20.0


def test_application_xid_is_cuda_error_evidence_not_node_isolation():
    events = [start(1.0, r) for r in range(8)] + [gpu(20.0, "n1", 1, xids=(13,))]
    (incident,), _ = run(events)
    assert (incident.category, incident.severity, incident.action) == (
        "cuda_error", "SEV2", "restart")
    assert incident.ts == 21.0  # held evidence_hold_s for a hardware explanation


def test_unknown_xids_and_idle_gpus_with_app_xids_are_ignored():
    out, _ = run([gpu(1.0, xids=(92,)), gpu(2.0, xids=(13,))])
    assert out == []


def test_one_open_hardware_incident_per_node_collects_later_evidence():
    events = [gpu(1.0), gpu(2.0, xids=(74,)), gpu(3.0, index=1, xids=(79,)), gpu(4.0, xids=(48,))]
    out, det = run(events)
    assert [i.category for i in out] == ["nvlink"]
    (rec,) = det.state.incidents.values()
    assert any("Xid 79" in line for line in rec.evidence)


def test_node_lost_after_missed_heartbeats_and_resolved_when_it_reports_again():
    events = healthy(0, 30, nodes=["a", "b"]) + healthy(30, 60, nodes=["b"])
    events += healthy(60, 62, nodes=["a"])
    out, _ = run(events)
    assert [(i.status, i.category, i.node) for i in out] == [
        ("open", "node_lost", "a"), ("resolved", "node_lost", "a")]
    last_seen = 29.02  # its last GPU sample
    assert out[0].ts == last_seen + 3.0  # 3 x 1 s interval
    assert out[1].ts == 60.01


def test_node_timeout_has_a_floor_for_fast_heartbeats():
    cfg = HeartbeatConfig()
    assert cfg.timeout_s(0.1) == 3.0 and cfg.timeout_s(10) == 30.0
    events = [hb(t / 10, "a", interval=0.1) for t in range(100)] + [hb(12.8, "b"), hb(13.0, "b")]
    out, _ = run(events)
    assert [(i.node, round(i.ts, 3)) for i in out] == [("a", 9.9 + 3.0)]


def test_a_node_that_never_heartbeated_is_not_tracked_for_loss():
    out, det = run([gpu(1.0, "a")] + healthy(1, 30, nodes=["b"]))
    assert out == []


def test_silent_gpu_on_a_beating_host_is_gpu_lost():
    events = healthy(0, 10) + healthy(10, 30, silent={("n0", 1)})
    (incident,), _ = run(events)
    assert (incident.category, incident.node) == ("gpu_lost", "n0")
    assert incident.first_ts == 9.02
    assert 5.0 < incident.ts - incident.first_ts <= 6.0  # silence_s, then the next heartbeat


def test_all_gpus_silent_is_the_sampler_not_the_gpus():
    events = healthy(0, 10) + healthy(10, 20, gpus=0) + healthy(20, 30)
    out, _ = run(events, Detector(DetectorConfig(gpu=GpuConfig(silence_s=3.0))))
    assert out == []


def test_a_lost_node_is_node_lost_only_not_gpu_lost_too():
    events = healthy(0, 10, nodes=["a", "b"]) + healthy(10, 40, nodes=["b"])
    events += healthy(40, 50, nodes=["a", "b"])  # back: its GPUs start afresh, no gpu_lost
    out, _ = run(events)
    assert [i.category for i in out] == ["node_lost", "node_lost"]


def test_link_flap_is_debounced_and_resolved_after_being_stable():
    ups = {0: True, 1: True, 2: False, 3: True, 4: False, 5: True}  # two flaps in 5 s
    events = [hb(float(t), links={"ib0": ups.get(t, True)}) for t in range(60)]
    out, _ = run(events)
    assert [(i.status, i.category, i.severity, i.ts) for i in out] == [
        ("open", "link_flap", "SEV3", 3.0), ("resolved", "link_flap", "SEV3", 35.0)]
    assert any("up again" in line for line in out[1].evidence[1:])


def test_a_link_that_stays_down_is_not_a_flap():
    out, _ = run([hb(float(t), links={"ib1": False}) for t in range(60)])
    assert out == []


def test_thermal_is_sustained_debounced_and_resolved():
    def sample(t, hot):
        return gpu(float(t), temp_c=95.0 if hot else 60.0,
                   throttle=("hw_thermal",) if hot else ())
    flicker = [sample(t, t % 2 == 0) for t in range(60)]  # never 15 s in a row
    assert run(flicker)[0] == []
    sustained = [sample(t, 10 <= t < 50) for t in range(100)]
    out, _ = run(sustained)
    assert [(i.status, i.category, i.severity, i.ts) for i in out] == [
        ("open", "thermal", "WARN", 25.0), ("resolved", "thermal", "WARN", 80.0)]
    assert out[0].first_ts == 10.0


def test_power_capping_is_not_thermal():
    out, _ = run([gpu(float(t), throttle=("sw_power_cap",)) for t in range(60)])
    assert out == []


def test_hardware_root_cause_absorbs_a_cuda_error_held_for_correlation():
    events = healthy(0, 40) + [start(0.5, r) for r in range(8)] + steps(1, 30)
    events += [error(30.1, 2, "RuntimeError: CUDA error: unspecified launch failure"),
               gpu(30.9, "n1", 0, xids=(79,))]
    incidents = opened(run(events)[0])
    assert [(i.category, i.node, i.job, i.first_ts, i.ts) for i in incidents] == [
        ("gpu_lost", "n1", "j", 30.1, 30.9)]


def test_a_silent_node_is_lost_only_after_its_deadline():
    det = Detector()
    det.observe(hb(10.0, "a"))
    assert det.advance(12.9) == [] and det.advance(13.0) == []
    assert [i.category for i in det.advance(13.01)] == ["node_lost"]
