"""What `trainmedic job submit` checks before it publishes, beyond the coordinator's bounds: that the
job's id is new and its nodes exist (in the log), and that its command can run here: mistakes the
coordinator cannot see (docs/coordinator.md#jobs)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.jobs import JobSpec

# An interpreter whose first non-option argument is the script it runs.
PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# Options after which python runs no script file (a module, a string of code).
NO_SCRIPT = frozenset({"-m", "-c"})
# python's options that take the next word as their value, not as the script.
TAKES_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def with_workdir(spec: JobSpec, spec_file: Path) -> JobSpec:
    """`spec` with an absolute `workdir`: its own, relative to the spec file's directory; else that
    directory. Relative paths in a spec resolve against it, so a rank runs where the user wrote the
    spec, whatever directory they submitted from."""
    base = spec_file.resolve().parent
    workdir = base if spec.workdir is None else base / Path(spec.workdir).expanduser()
    return spec.model_copy(update={"workdir": str(Path(os.path.normpath(workdir)))})


def command_problem(spec: JobSpec, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why the job's argv cannot run here (in its workdir), or None: its first word is an absolute
    executable, a relative path to one under workdir, or a name on PATH; and a python script it
    names exists."""
    workdir = Path(spec.workdir or ".")
    program, *rest = spec.argv
    if os.sep in program:
        path = workdir / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            where = "" if Path(program).is_absolute() else f" under workdir {workdir}"
            return f"command {program!r} is not an executable file{where}"
    elif which(program) is None:
        return f"command {program!r} is not found on PATH"
    script = python_script(program, rest)
    if script is not None and not (workdir / script).is_file():
        return f"script {script!r} does not exist under workdir {workdir} (python runs it from there)"
    return None


def python_script(program: str, args: Iterable[str]) -> str | None:
    """The .py file `program args` runs when `program` is python, or None."""
    if not PYTHON.fullmatch(Path(program).name):
        return None
    words = iter(args)
    for word in words:
        if word in NO_SCRIPT:
            return None
        if word in TAKES_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word if word.endswith(".py") else None
    return None


def log_problems(spec: JobSpec, state: ClusterState, allow_unknown_nodes: bool) -> list[str]:
    """Why the log says `spec` should not be submitted: its id is taken, or (unless allowed) it names
    a node the log never heard from and the coordinator's config does not list (`state.members`).
    The coordinator would take both: a second job under a taken id is ignored (the first stands), and
    a node no executor ever ran on waits forever, then looks like a lost node."""
    problems = []
    if (known := state.jobs.get(spec.id)) is not None:
        problems.append(f"a job with id {spec.id} is already in the log ({known.state}); a second submission "
                        f"of an id is ignored: pick a new id")
    unheard = [n for n in spec.nodes if n not in state.members
               and (n not in state.nodes or state.nodes[n].heard_from is None)]
    if unheard and not allow_unknown_nodes:
        problems.append(f"{'node' if len(unheard) == 1 else 'nodes'} {', '.join(unheard[:5])} never heard "
                        "from: no executor there has reported and the coordinator's --config does not "
                        "list it; start `trainmedic node` there first, or pass --allow-unknown-nodes")
    return problems
