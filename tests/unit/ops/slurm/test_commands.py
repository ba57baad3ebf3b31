"""Slurm's commands as trainmedic runs them (ops/slurm/scheduler.py: argv, never a shell; a site's own
command with {node} and {reason}), and the batch script `trainmedic slurm sbatch` writes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic import cli
from trainmedic.common.errors import ConfigError
from trainmedic.ops.slurm.drains import Change, SlurmNode
from trainmedic.ops.slurm.scheduler import DRAIN, Scheduler, SlurmError, template

RECORD = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write(repr(sys.argv[2:]) + '\\n')"]


def test_a_sites_command_gets_the_node_and_the_reason_as_single_words(tmp_path: Path) -> None:
    out = tmp_path / "calls"
    scheduler = Scheduler(query=(*RECORD[:2], "print('n1|drained|trainmedic: x, incident i')"),
                          drain=(*RECORD, str(out), "drain", "{node}", "why={reason}"),
                          resume=(*RECORD, str(out), "resume", "{node}"))
    assert scheduler.nodes() == {"n1": SlurmNode("n1", True, "trainmedic: x, incident i")}
    scheduler.apply(Change("drain", "n1", "trainmedic: a b; $(c)"))
    scheduler.apply(Change("resume", "n1"))
    assert out.read_text().splitlines() == ["['drain', 'n1', 'why=trainmedic: a b; $(c)']",
                                            "['resume', 'n1']"]


def test_a_failing_or_missing_command_is_an_error_that_quotes_it() -> None:
    with pytest.raises(SlurmError, match="exit 3: no permission"):
        Scheduler(query=("sh", "-c", "echo no permission >&2; exit 3")).nodes()
    with pytest.raises(SlurmError, match="no-such-scontrol"):
        Scheduler(resume=("no-such-scontrol", "{node}")).apply(Change("resume", "n1"))


def test_a_command_template_must_name_what_it_is_given() -> None:
    assert template(DRAIN, "--drain-command", ("node", "reason"))[0] == "scontrol"
    with pytest.raises(ConfigError, match=r"\{reason\}"):
        template("scontrol update NodeName={node} State=DRAIN", "--drain-command", ("node", "reason"))
    with pytest.raises(ConfigError, match="--resume-command"):
        template("scontrol 'unclosed", "--resume-command", ("node",))


def test_sbatch_writes_a_script_that_runs_the_job_with_the_node_options_after_dashes(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("id: llm\n")
    done = subprocess.run([sys.executable, "-m", "trainmedic.cli", "slurm", "sbatch", str(spec), "--nodes",
                           "2", "--spares", "1", "--sbatch=--time=1:00:00", "--", "--source", "synthetic",
                           "--jobs-dir", "/j/{node} x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert {"#SBATCH --nodes=3", "#SBATCH --no-kill", "#SBATCH --time=1:00:00"} <= set(lines)
    argv = shlex.split(lines[-1])
    assert argv[:4] == ["exec", sys.executable, "-m", "trainmedic.cli"]
    assert argv[4:9] == ["slurm", "run", str(spec), "--spares", "1"]
    assert argv[argv.index("--"):] == ["--", "--source", "synthetic", "--jobs-dir", "/j/{node} x"]


def test_only_a_command_that_asks_for_it_takes_what_follows_dashes_whole() -> None:
    parser_args = ["slurm", "node", "--home", "/h/{node}", "--", "--home", "other"]
    seen = {}
    module = __import__("trainmedic.ops.slurm.cli", fromlist=["run"])
    real = module.run
    module.run = lambda args: seen.update(home=args.home, rest=args.node_args) or 0
    try:
        assert cli.main(parser_args) == 0
    finally:
        module.run = real
    assert seen == {"home": "/h/{node}", "rest": ["--home", "other"]}
    with pytest.raises(SystemExit):  # `job` takes no words after --
        cli.main(["job", "list", "--", "x"])
