"""What `job submit` checks before publishing: the command resolves in the job's workdir (which
defaults to the spec file's directory), the id is new, and the nodes were heard from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.coordinator.world import CONFIG, submitted
from trainmedic.bus.message import Record
from trainmedic.ops.jobs.checks import command_problem, log_problems, python_script, with_workdir
from trainmedic.recovery.coordinator.core import ClusterState
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.intake import listing
from trainmedic.schemas import CommandAcked, JobSpec, RanksFinished


def spec(command=("python", "train.py"), **fields) -> JobSpec:
    return JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 1e15}, command=command, **fields)


def test_a_spec_without_workdir_runs_in_the_spec_files_directory(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    assert with_workdir(spec(), tmp_path / "proj" / "job.yaml").workdir == str(tmp_path / "proj")
    moved = with_workdir(spec(workdir="../data"), tmp_path / "proj" / "job.yaml")
    assert moved.workdir == str(tmp_path / "data")
    assert with_workdir(spec(workdir="/srv/x"), tmp_path / "job.yaml").workdir == "/srv/x"


@pytest.mark.parametrize(("argv", "script"), [
    (("python", "train.py", "--lr", "1"), "train.py"),
    (("python3", "-u", "-X", "dev", "sub/train.py"), "sub/train.py"),
    (("/usr/bin/python3.11", "-O", "t.py"), "t.py"),
    (("python", "-m", "pkg.train"), None),
    (("python", "-c", "print(1)"), None),
    (("python", "data.bin"), None),
    (("torchrun", "train.py"), None),
])
def test_the_script_python_runs_is_its_first_non_option_word(argv, script) -> None:
    assert python_script(argv[0], argv[1:]) == script


def test_a_command_resolves_on_path_under_workdir_or_absolute(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    run = tmp_path / "run.sh"
    run.write_text("#!/bin/sh\n")
    run.chmod(0o755)
    here = str(tmp_path)
    assert command_problem(spec(workdir=here)) is None  # python on PATH, train.py under workdir
    assert command_problem(spec(("./run.sh",), workdir=here)) is None
    assert command_problem(spec((str(run),), workdir="/")) is None
    assert command_problem(spec(("python",), args=("train.py",), workdir=here)) is None  # script in args
    assert command_problem(spec(("pyhton", "train.py"), workdir=here)) == (
        "command 'pyhton' is not found on PATH")
    assert command_problem(spec(("python", "tarin.py"), workdir=here)) == (
        f"script 'tarin.py' does not exist under workdir {here} (python runs it from there)")
    assert command_problem(spec(("./nope.sh",), workdir=here)) == (
        f"command './nope.sh' is not an executable file under workdir {here}")
    (tmp_path / "plain.sh").write_text("")
    assert "not an executable file" in command_problem(spec(("./plain.sh",), workdir=here))
    assert command_problem(spec(("/no/such/bin",), workdir=here)) == (
        "command '/no/such/bin' is not an executable file")
    assert os.access(run, os.X_OK)


def test_a_taken_id_and_nodes_never_heard_from_are_refused() -> None:
    state = ClusterState.initial(CONFIG.model_copy(update={"nodes": ()}))
    assert log_problems(spec(), state, False) == [
        "nodes n1, n2 never heard from: no executor there has reported and the coordinator's --config does "
        "not list it; start `trainmedic node` there first, or pass --allow-unknown-nodes"]
    assert log_problems(spec(), state, True) == []


def test_a_node_is_heard_from_by_its_signed_reports_or_listed_by_the_config() -> None:
    state = ClusterState.initial(CONFIG)  # n1-n6 listed
    assert log_problems(spec(), state, False) == []
    apply(state, submitted(nodes=("n1", "n2")))
    assert log_problems(spec(), state, False) == [
        "a job with id llm is already in the log (submitted); a second submission of an id is ignored: "
        "pick a new id"]
    other = spec().model_copy(update={"id": "other"})
    log = [("jobs", submitted(nodes=("n1", "n2"))),
           ("acks", CommandAcked(ts=5.0, node="n1", command_id="c", job="llm", generation=0, status="done"))]
    state = listing([Record(t, 0, i, None, event, b"") for i, (t, event) in enumerate(log)], None, "jobs")
    assert log_problems(other, state, False) == [  # without the config: as the log says
        "node n2 never heard from: no executor there has reported and the coordinator's --config does "
        "not list it; start `trainmedic node` there first, or pass --allow-unknown-nodes"]
    apply(state, RanksFinished(ts=6.0, node="n2", job="llm", generation=0, ranks=()))
    assert state.nodes["n1"].heard_from == 5.0 and state.nodes["n2"].heard_from == 6.0
    assert log_problems(other, state, False) == []
