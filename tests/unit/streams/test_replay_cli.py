from __future__ import annotations

import json
from pathlib import Path

from trainmedic.cli import main
from trainmedic.schemas.incident import Incident
from trainmedic.streams.replay import replay

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_replay_writes_incidents_as_json_lines_and_reports_bad_lines(tmp_path, capsys):
    out = tmp_path / "incidents.jsonl"
    assert main(["replay", str(SCENARIOS / "node_lost_gloo.jsonl"), "--output", str(out)]) == 0
    incidents = [Incident.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [(i.status, i.category) for i in incidents] == [("open", "node_lost"),
                                                          ("resolved", "node_lost")]
    assert main(["replay", str(SCENARIOS / "malformed_lines.jsonl")]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    expected = json.loads((SCENARIOS / "malformed_lines.expected.json").read_text())
    reported = [line for line in captured.err.splitlines() if "skipped" in line]
    assert [int(line.split(":")[1]) for line in reported] == expected["bad_lines"]
    assert all(len(line.split(": skipped: ")[1]) > 5 for line in reported)


def test_equal_timestamps_keep_file_order(tmp_path, capsys):
    lines = [
        {"type": "worker_start", "ts": 1.0, "node": "a", "job": "j", "rank": 0, "world_size": 1},
        {"type": "worker_error", "ts": 2.0, "node": "a", "job": "j", "rank": 0,
         "world_size": 1, "error": "ValueError: boom"},
        {"type": "worker_exit", "ts": 2.0, "node": "a", "job": "j", "rank": 0,
         "world_size": 1, "exit_code": 1},
    ]
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert main(["replay", str(path)]) == 0
    (incident,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert incident["category"] == "software_error"  # the exit after the error is fallout
    path.write_text("\n".join(json.dumps(line) for line in [lines[0], lines[2], lines[1]]))
    assert main(["replay", str(path)]) == 0
    (incident,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert incident["category"] == "software_error"  # more specific than the bare exit


def test_tail_lets_silence_at_the_end_of_a_recording_count():
    from trainmedic.schemas.telemetry import NodeHeartbeat

    events = [NodeHeartbeat(ts=float(t), node="a", interval=1.0) for t in range(10)]
    assert replay(events) == []
    (incident,) = replay(events, tail_s=5.0)
    assert (incident.category, incident.ts) == ("node_lost", 12.0)
