"""`trainmedic run`'s pure parts: the job spec it submits and what it prints while the job runs."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainmedic.cli import build_parser
from trainmedic.run.narrate import RunNarrator
from trainmedic.run.spec import default_job_id, parse_env, run_spec, shell_env, spec_yaml
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.jobs import JobSpec
from trainmedic.schemas.telemetry import WorkerExited, WorkerStepped


def test_the_command_after_the_double_dash_is_the_jobs_and_the_spec_reads_back() -> None:
    args = build_parser("run").parse_args(["run", "--nodes", "3", "--nproc-per-node", "2", "--env", "A=1=2",
                                           "--", "python", "train.py", "--lr", "3e-4", "--nodes", "9"])
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    user = ["python", "train.py", "--lr", "3e-4", "--nodes", "9"]
    assert (args.nodes, args.nproc_per_node, command) == (3, 2, user)
    spec = run_spec("train-1", command, nodes=3, ranks_per_node=2, workdir=Path("/work/me"),
                    master_port=29511, env=parse_env(args.env), max_restarts=2)
    assert spec.nodes == ("local-0", "local-1", "local-2") and spec.ranks_per_node == 2
    assert spec.throughput == {1: 1 / 3, 2: 2 / 3, 3: 1.0}  # it can shrink onto the nodes left
    assert (spec.workdir, spec.env, spec.restart.max_restarts) == ("/work/me", {"A": "1=2"}, 2)
    assert spec.argv == tuple(user)
    assert JobSpec.model_validate(yaml.safe_load(spec_yaml(spec))) == spec  # `job submit` reads the same job


def test_default_job_ids_name_the_script_or_module() -> None:
    assert default_job_id(["python", "-u", "my train.py", "--lr", "1"], 1_733_000_123.9) == "my-train-000123"
    assert default_job_id(["python", "-m", "pkg.train_lm"], 5.0) == "train_lm-000005"
    assert default_job_id(["./run.sh"], 5.0) == "run-000005"


def step(generation: int, step: int, ts: float, rank: int = 0) -> WorkerStepped:
    return WorkerStepped(ts=ts, node="local-0", job="j", rank=rank, world_size=2, generation=generation,
                         step=step, step_time=0.1)


def test_steps_are_printed_at_most_once_per_period_and_state_changes_once_each() -> None:
    narrator = RunNarrator("j", started=100.0, every_s=1.0)
    assert narrator.job_state("running") == ["job j: running"] and narrator.job_state("running") == []
    assert narrator.event(step(0, 0, 110.0), now=110.0) == ["first step 0 after 10.0 s",
                                                             "step 0 | generation 0, world size 2"]
    assert narrator.event(step(0, 0, 110.1, rank=1), 110.1) == []
    assert [narrator.event(step(0, s, 110 + s / 10), 110 + s / 10) for s in range(1, 10)] == [[]] * 9
    assert narrator.event(step(0, 10, 111.0), 111.0) == [
        "step 10 | 10.00 steps/s | generation 0, world size 2"]
    assert narrator.progress(111.2) == [] and narrator.progress(111.2, force=True) == []  # nothing new
    incident = Incident(id="i1", ts=112.0, first_ts=111.5, category="process_exit", severity="SEV2",
                        action="restart", job="j", node="local-1", status="open")
    assert narrator.event(incident, 112.0) == [
        "INCIDENT SEV2 process_exit on node local-1 -> restart (decided 0.50s after the first evidence)"]
    narrator.event(step(1, 11, 120.0), 120.0)
    narrator.job_state("succeeded")
    assert narrator.summary(restarts=1) == (
        "job j succeeded: last step 11, 2 generations, 1 restart, 0 steps lost")


def test_the_summary_counts_generations_that_never_stepped() -> None:
    narrator = RunNarrator("j", started=100.0)
    for generation in (0, 1):
        narrator.event(WorkerExited(ts=101.0 + generation, node="local-0", job="j", rank=0, world_size=2,
                                    generation=generation, exit_code=1), 102.0)
    narrator.job_state("failed")
    assert narrator.summary(restarts=1) == "job j failed: no step, 2 generations, 1 restart, 0 steps lost"


def test_what_cannot_run_is_refused_before_anything_starts(tmp_path: Path, monkeypatch, capsys) -> None:
    from trainmedic.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path / "home"))
    assert main(["run", "--", "python", "train.py"]) == 2
    assert main(["run", "--", "no-such-program-here"]) == 2
    assert main(["run", "--env", "RANK=3", "--", "python", "-c", "pass"]) == 2
    assert main(["run"]) == 2
    said = capsys.readouterr().err
    assert "script 'train.py' does not exist under workdir" in said
    assert "'no-such-program-here' is not found on PATH" in said and "env sets RANK" in said
    for bad in (["--max-restarts", "-1"], ["--hang-floor-s", "-5"], ["--nproc-per-node", "99999"],
                ["--job-id", "../../etc"]):  # out of the schema's bounds, or the coordinator's
        assert main(["run", *bad, "--", "python", "-c", "pass"]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("trainmedic run: ") and err.count("\n") == 1, err  # one line, no traceback
        assert bad[1].lstrip("-./") in err, err  # it names the value it refuses
    assert not (tmp_path / "home").exists()  # no broker, no keys, no services


def test_a_run_keeps_its_keys_in_a_folder_of_its_own(tmp_path: Path) -> None:
    from trainmedic.local.cluster import LocalCluster
    from trainmedic.run.session import run_layout

    shared = tmp_path / "keys"  # what a real node or coordinator on this machine reads live
    shared.mkdir()
    (shared / "keys.json").write_text("{}")
    layout = run_layout(tmp_path, "train-1")
    cluster = LocalCluster(layout, "127.0.0.1:9092", "run-abc.", ("local-0", "local-1"))
    cluster.prepare({})
    assert [p.name for p in shared.iterdir()] == ["keys.json"] and (shared / "keys.json").read_text() == "{}"
    assert layout.keys_dir == tmp_path / "run" / "keys" and layout.operator_key() is not None
    env = cluster.env()  # every service is told the run's folder
    told = {env["TRAINMEDIC_COORDINATOR_KEYS_DIR"], env["TRAINMEDIC_EXECUTOR_KEYS_DIR"]}
    assert told == {str(tmp_path / "run" / "keys")}
    assert layout.executor_dir("local-0") == tmp_path / "executor" / "local-0"  # its ledger


def test_a_plan_that_takes_every_node_says_where_the_job_stopped() -> None:
    from trainmedic.schemas import RecoveryPlanned

    narrator = RunNarrator("j", started=100.0)
    stop = RecoveryPlanned(ts=101.0, plan_id="p", incident_id=None, job="j", kind="restart", generation=2,
                           nodes=(), previous=("local-0", "local-1"))
    assert narrator.event(stop, 101.0) == [
        "recovery: job j stopped on local-0, local-1 at generation 2: no node runs it"]


def test_a_run_passes_the_shells_environment_but_trainmedics_own() -> None:
    environ = {"WANDB_API_KEY": "k", "HF_HOME": "/data/hf", "CRASH_FILE": "/tmp/c", "PATH": "/usr/bin",
               "TRAINMEDIC_HOME": "/h", "TRAINMEDIC_KAFKA_CONFIG": "/c", "TRAINMEDIC_CLUSTER_KEY": "s",
               "TRAINMEDIC_DEMO_FAULTS": "xid79", "BASH_FUNC_f%%": "() { :; }", "A,B": "1"}
    assert shell_env(environ) == ["CRASH_FILE", "HF_HOME", "PATH", "TRAINMEDIC_DEMO_FAULTS", "WANDB_API_KEY"]
