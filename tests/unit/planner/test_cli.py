"""`trainmedic plan` run as a real command: JSON out, or one line on stderr and exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRAINMEDIC = str(Path(sys.executable).parent / "trainmedic")

GOOD = {
    "nodes": [{"id": "a", "switch": "leaf-1"}, {"id": "b", "switch": "leaf-1", "healthy": False},
              {"id": "c", "switch": "leaf-2"}],
    "jobs": [{"id": "j", "throughput": {"2": 1e15}, "current": ["a", "b"], "transition_s": 10}],
    "horizon_s": 100,
}


def trainmedic_plan(path, stdin=None):
    return subprocess.run(
        [TRAINMEDIC, "plan", str(path)], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_prints_the_plan_as_json(tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps(GOOD))
    done = trainmedic_plan(path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "allocations": {"j": ["a", "c"]},
        "sizes": {"j": 2},
        "waf": 1e15,
        "objective": 1e15 * 100 - 1e15 * 10,
        "restore": {"c": {"kind": "replica", "node": "a"}},
    }


def test_dash_reads_stdin():
    done = trainmedic_plan("-", stdin=json.dumps(GOOD))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sizes"] == {"j": 2}


def with_job(**fields):
    return json.dumps({**GOOD, "jobs": [{**GOOD["jobs"][0], **fields}]})


@pytest.mark.parametrize(("text", "message"), [
    ('{"nodes": [], "jobs": [],}', "stdin: Invalid JSON: trailing comma at line 1 column 26"),
    (with_job(weight="heavy"), "stdin: jobs[0].weight: Input should be a valid number"),
    (with_job(owner="me"), "stdin: jobs[0].owner: Extra inputs are not permitted"),
    (with_job(throughput={"-4": 1.0}), "stdin: jobs[0].throughput: sizes must be positive"),
    (with_job(current=["a", "a"]), "stdin: jobs[0].current: node 'a' is listed twice"),
    (json.dumps({**GOOD, "nodes": GOOD["nodes"] * 2}),
     "stdin: nodes: node 'a' is listed twice (nodes[0] and nodes[3])"),
    (json.dumps({**GOOD, "horizon_s": 0}), "stdin: horizon_s: Input should be greater than 0"),
    # Finite but past the bounds: the objective overflowed to -inf and the planner raised.
    (with_job(weight=1e300), "stdin: jobs[0].weight: Input should be less than or equal to 1000"),
    (with_job(throughput={"2": 1e300}), "stdin: jobs[0].throughput: 1e+300 FLOP/s at size 2 is above "
                                        "1e+17 per node"),
    (json.dumps({**GOOD, "horizon_s": 1e300}), "stdin: horizon_s: Input should be less than or equal to"),
    (with_job(transition_s=1e300), "stdin: jobs[0].transition_s: Input should be less than or equal to"),
])
def test_bad_input_is_one_line_and_exit_2(text, message):
    done = trainmedic_plan("-", stdin=text)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"trainmedic plan: {message}")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_missing_file(tmp_path):
    done = trainmedic_plan(tmp_path / "absent.json")
    assert done.returncode == 2
    assert done.stderr == f"trainmedic plan: cannot read {tmp_path / 'absent.json'}: " \
        "No such file or directory\n"


def test_help_explains_the_input():
    done = subprocess.run([TRAINMEDIC, "plan", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "throughput" in done.stdout and "horizon_s" in done.stdout
