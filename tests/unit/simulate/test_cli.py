"""`trainmedic simulate` as a user runs it: a bundled scenario or a file, its outputs, its errors."""

from __future__ import annotations

import json

import pytest
import yaml

from trainmedic.cli import main
from trainmedic.simulate.cli import SCENARIOS
from trainmedic.simulate.scenario import load

SMALL = {"name": "small", "description": "two jobs on 8 nodes", "duration_days": 2, "seeds": 2,
         "cluster": {"nodes": 8, "nodes_per_switch": 4},
         "jobs": [{"id": "a", "nodes": 4, "min_nodes": 2}, {"id": "b", "nodes": 3, "min_nodes": 1}],
         "failures": {"mix": "unicron", "mttf_gpu_h": 20, "repair_h": 2}}


def test_a_scenario_file_runs_every_policy_and_writes_its_report(tmp_path, capsys):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out, copy = tmp_path / "out", tmp_path / "r.json"
    assert main(["simulate", str(path), "--out", str(out), "--json", str(copy)]) == 0
    printed = capsys.readouterr()
    assert "restart-all" in printed.out and "trainmedic" in printed.out and "GPU-hours lost" in printed.out
    assert "100%" in printed.err  # the progress
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert written == {"small.txt", "small.json", "small.csv", "small.png"}
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["scenario"]["seeds"] == [1, 2]
    policies = result["policies"]
    assert set(policies) == {"restart-all", "elastic", "trainmedic"}
    assert policies["restart-all"]["ratio_to_restart_all"] == 1.0
    for figures in policies.values():
        assert 0 < figures["ettr"] <= 1 and figures["waf_accumulated"] > 0
        assert set(figures["lost_gpu_hours"]) >= {"detection", "restart", "recomputation", "shrunk",
                                                  "repair_wait"}
    assert (tmp_path / "out" / "small.png").read_bytes()[:4] == b"\x89PNG"
    rows = (tmp_path / "out" / "small.csv").read_text().splitlines()
    assert rows[0] == "policy,seed,hours,waf_accumulated" and len(rows) == 1 + 3 * 2 * 200


def test_the_same_seeds_give_the_same_numbers(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    for out in ("one", "two"):
        assert main(["simulate", str(path), "--seeds", "1", "--out", str(tmp_path / out)]) == 0
    assert (tmp_path / "one" / "small.json").read_text() == (tmp_path / "two" / "small.json").read_text()


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_bundled_scenarios_are_valid_and_listed(path, capsys):
    scenario = load(path)
    assert scenario.name == path.stem and scenario.description
    assert main(["simulate", "--list"]) == 0
    assert path.stem in capsys.readouterr().out


def test_the_bundled_unicron_scenario_runs_by_name(tmp_path):
    assert main(["simulate", "unicron-128", "--days", "1", "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "unicron-128.json").read_text())["scenario"]["duration_days"] == 1


def test_what_cannot_run_is_said_in_one_line(tmp_path, capsys):
    assert main(["simulate", "no-such-scenario"]) == 2
    assert "no scenario 'no-such-scenario'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**SMALL, "jobs": [{"id": "a", "nodes": 9}]}))
    assert main(["simulate", str(bad)]) == 2
    assert "the jobs ask for 9 nodes; the cluster has 8" in capsys.readouterr().err
    assert main(["simulate", "unicron-128", "--policies", "torchft"]) == 2
    assert "unknown policy torchft" in capsys.readouterr().err
    assert main(["simulate", "unicron-128", "--days", "0", "--out", str(tmp_path)]) == 2
    assert "duration_days" in capsys.readouterr().err  # checked as in the file, not divided by


def test_an_incident_log_next_to_the_scenario_is_its_trace(tmp_path):
    from tests.unit.simulate.test_traces import incident_log

    log, _ = incident_log(tmp_path)
    path = tmp_path / "replayed.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "name": "replayed", "failures": {"replay": log.name}}))
    assert main(["simulate", str(path), "--seeds", "1", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "replayed.json").read_text())
    assert result["scenario"]["faults_per_seed"] == [3]  # the log's three detected faults
