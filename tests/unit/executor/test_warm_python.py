"""Warm starts for every way a user starts Python: `python -m MOD`, `python train.py`, a console script.
A forked rank sees what a new `python` started the same way sees (compared with one, run cold), and
what python would run otherwise (a directory as the script) is exec'd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.python_main import WarmTarget, warm_target
from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec

PY = sys.executable

# What a rank sees of how it was started, one JSON line; and whether torch was imported before its
# first line ran (only a fork of the warm zygote has it).
PROBE = '''
import sys
warm = "torch" in sys.modules
import json, os, pickle
import __main__

class Thing:
    pass

print(json.dumps({"argv": sys.argv, "orig": sys.orig_argv, "path0": sys.path[0], "path1": sys.path[1],
                  "file": __file__, "nice": os.nice(0), "stdout": type(sys.stdout.buffer).__name__,
                  "line_buffered": [sys.stdout.line_buffering, sys.stderr.line_buffering],
                  "name": __name__, "main": __main__.__dict__ is globals(),
                  "spec": __spec__ and __spec__.name,
                  "package": __package__, "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                  "pickles": type(pickle.loads(pickle.dumps(Thing()))).__name__}))
print("warm" if warm else "cold")
if "PROBE_EXIT" in os.environ:
    sys.exit(int(os.environ["PROBE_EXIT"]))
'''


@pytest.mark.parametrize(("argv", "expected"), [
    ((PY, "-m", "pkg.train", "--steps", "3"), WarmTarget("module", "pkg.train", ("--steps", "3"))),
    (("nice", "-n", "10", PY, "-m", "pkg.train"), WarmTarget("module", "pkg.train", (), 10)),
    ((PY, "train.py", "--lr", "1"), WarmTarget("script", "train.py", ("--lr", "1"))),
    ((os.path.join(os.path.dirname(PY), "python3"), "t.py"), WarmTarget("script", "t.py", ())),  # beside it
    (("nice", "-n", "5", PY, "/opt/jobs/train.py"), WarmTarget("script", "/opt/jobs/train.py", (), 5)),
    (("python3.9", "-m", "pkg.train"), None),  # another interpreter: its own site-packages
    ((PY, "-u", "train.py"), None),  # an interpreter option: python's to read
    ((PY, "-c", "print(1)"), None),
    (("sh", "-c", "sleep 1"), None),
    ((PY, "-m"), None),
    ((PY,), None),
])
def test_the_forms_read_from_the_words(argv, expected) -> None:
    assert warm_target(argv) == expected


@pytest.fixture(scope="module")
def warm_supervisor() -> Iterator[Supervisor]:
    sup = Supervisor(trees=JobTrees(warm=True))
    yield sup
    sup.stop_all(grace_s=0.1)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "job" / "lib").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "probe.py").write_text(PROBE)
    (tmp_path / "job" / "train.py").symlink_to(tmp_path / "scripts" / "probe.py")  # sys.path[0]: its target's
    return tmp_path / "job"


def env(**more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": "lib", "PROBE": "from the shell", **more}


def launched(sup: Supervisor, workdir: Path, argv: tuple[str, ...], **more: str) -> tuple[str, int | None]:
    """The log and exit code of `argv` started by the warm launcher in `workdir`."""
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32, ranks=(0,), world_size=1, master_addr="h",
                      master_port=1, command=argv, workdir=str(workdir))
    home = workdir.parent / f"home-{time.monotonic_ns()}"
    sup.launch("j", 0, spec, [env(**more)], home)
    deadline = time.monotonic() + 60
    while not (ended := sup.reap()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ended, "the rank did not end"
    return (home / "logs" / "g0-rank0.log").read_text(), ended[0].exit_code


def warm_run(sup: Supervisor, workdir: Path, argv: tuple[str, ...], **more: str
             ) -> tuple[dict, str, int | None]:
    """The probe's JSON, its warm/cold line and its exit code, started by the warm launcher."""
    log, code = launched(sup, workdir, argv, **more)
    lines = log.splitlines()
    return json.loads(lines[0]), lines[1], code


def cold_run(workdir: Path, argv: tuple[str, ...], **more: str) -> tuple[dict, str, int]:
    done = subprocess.run(argv, cwd=workdir, env=env(**more), capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    return json.loads(lines[0]), lines[1], done.returncode


def test_a_script_runs_warm_as_python_would_run_it(warm_supervisor, workdir: Path) -> None:
    argv = ("nice", "-n", "5", PY, "train.py", "--lr", "3e-4")
    warm, how, code = warm_run(warm_supervisor, workdir, argv, PROBE_EXIT="3", PYTHONUNBUFFERED="")
    assert (how, code) == ("warm", 3)
    assert warm == cold_run(workdir, argv, PROBE_EXIT="3", PYTHONUNBUFFERED="")[0]
    assert (warm["stdout"], warm["line_buffered"]) == ("BufferedWriter", [False, True])  # to a file
    assert (warm["argv"], warm["nice"]) == (["train.py", "--lr", "3e-4"], os.nice(0) + 5)
    assert warm["path0"] == str(workdir.parent / "scripts")  # the link's target's directory
    assert warm["path1"] == str(workdir / "lib")  # the rank's PYTHONPATH, not the zygote's
    assert (warm["name"], warm["main"], warm["pickles"]) == ("__main__", True, "Thing")


def test_a_module_runs_warm_as_python_would_run_it(warm_supervisor, workdir: Path) -> None:
    (workdir / "lib" / "probe_mod.py").write_text(PROBE)
    argv = (PY, "-m", "probe_mod", "--x")
    warm, how, code = warm_run(warm_supervisor, workdir, argv, PYTHONUNBUFFERED="1")
    assert (how, code) == ("warm", 0)  # it ran to its end
    assert warm == cold_run(workdir, argv, PYTHONUNBUFFERED="1")[0]
    assert (warm["path0"], warm["argv"][1:], warm["stdout"]) == (str(workdir), ["--x"], "FileIO")


def test_a_console_script_of_this_python_runs_warm(warm_supervisor, workdir: Path) -> None:
    tool = workdir.parent / "bin" / "train-tool"
    tool.parent.mkdir()
    tool.write_text(f"#!{PY}\n{PROBE}")
    tool.chmod(0o755)
    argv = ("train-tool", "a")
    path = f"{tool.parent}{os.pathsep}{os.environ['PATH']}"
    warm, how, code = warm_run(warm_supervisor, workdir, argv, PATH=path)
    assert (how, code) == ("warm", 0)
    assert warm == cold_run(workdir, argv, PATH=path)[0]
    assert warm["argv"] == [str(tool), "a"]


def test_what_python_runs_otherwise_is_execd(warm_supervisor, workdir: Path) -> None:
    (workdir / "app").mkdir()
    (workdir / "app" / "__main__.py").write_text(PROBE)
    with zipfile.ZipFile(workdir / "app.pyz", "w") as archive:
        archive.writestr("__main__.py", PROBE)
    other = workdir.parent / "bin" / "other-tool"
    other.parent.mkdir()
    other.write_text(f"#!{PY} -s\n{PROBE}")  # not exactly this interpreter's line
    other.chmod(0o755)
    shadowing = workdir.parent / "shadowing"
    shadowing.mkdir()
    (shadowing / "probe.py").write_text(PROBE)
    (shadowing / "setproctitle.py").write_text("")  # the zygote's own import: python would load this one
    cases = [((PY, "app"), {}), ((PY, "app.pyz"), {}), ((str(other),), {}),
             ((PY, str(shadowing / "probe.py")), {}),
             ((PY, "train.py"), {"PYTHONHASHSEED": "7"})]  # read at start: the zygote started without it
    for argv, more in cases:
        ran, how, _ = warm_run(warm_supervisor, workdir, argv, **more)
        assert how == "cold", argv
        assert ran == cold_run(workdir, argv, **more)[0]


def test_a_failing_script_ends_as_python_ends_it(warm_supervisor, workdir: Path) -> None:
    (workdir / "fails.py").write_text("import sys\nprint('warm' if 'torch' in sys.modules else 'cold')\n"
                                      "if len(sys.argv) > 1:\n    sys.exit(sys.argv[1])\n"
                                      "raise ValueError('the job broke')\n")
    for argv in ((PY, "fails.py"), (PY, "fails.py", "a message"), (PY, "missing.py")):
        log, code = launched(warm_supervisor, workdir, argv)
        cold = subprocess.run(argv, cwd=workdir, env=env(), capture_output=True, text=True, timeout=60)
        assert code == cold.returncode != 0
        assert log.splitlines()[-1] == cold.stderr.splitlines()[-1]
        if argv[1] == "fails.py":  # it ran in the fork: nothing of the fork's own shows
            assert log.startswith("warm\n") and "forkserver" not in log and "python_main" not in log
