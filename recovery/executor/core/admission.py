"""The executor's admission policy: which rank commands (argv, workdir, paths, job env) may run on
this node at all; anything else is refused with the rule it broke (docs/executor.md, "Admission policy").
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from trainmedic.recovery.executor.core.niceness import split_nice
from trainmedic.schemas import WorkerSpec
from trainmedic.schemas.jobs import LATEST

DEMO_MODULES = ("trainmedic.demo",)


class AdmissionPolicy(BaseModel):
    """What this cluster lets a job run; the default admits the demo's training module only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_executables: tuple[str, ...] = Field(
        default=(), description="programs a rank may be, with any arguments: absolute paths, or names "
        "looked up on PATH")
    allowed_modules: tuple[str, ...] = Field(
        default=DEMO_MODULES, description="Python modules (and the modules inside them) a rank may run "
        "as `PYTHON -m MODULE`")
    allowed_interpreters: tuple[str, ...] = Field(
        default=(), description="Pythons that may run the allowed modules and scripts, besides the "
        "executor's own: exact paths (or names looked up on PATH), links not followed")
    allowed_script_dirs: tuple[str, ...] = Field(
        default=(), description="directories whose scripts an allowed Python may run (`PYTHON SCRIPT`)")
    allowed_dirs: tuple[str, ...] = Field(
        default=(), description="directories a job's checkpoint_dir and resume point must be in; "
        "none listed: anywhere")
    job_env: tuple[str, ...] = Field(
        default=(), description="the variables a job's env may set: exact names (none listed: a job "
        "sets none)")
    rank_env: tuple[str, ...] = Field(
        default=(), description="more variables the ranks get from the executor's environment: names, "
        "or prefixes ending in * (trainmedic's own credentials never pass)")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a command may not run: the `rule` it broke (a metric label) and the words for the ack."""

    rule: str
    reason: str

    def __str__(self) -> str:
        return f"admission policy ({self.rule}): {self.reason}"


Which = Callable[[str], str | None]


def resolve(program: str, which: Which = shutil.which) -> str | None:
    """`program` as an absolute, normalised path: a path as given, a bare name looked up on PATH."""
    if "\x00" in program:  # no file has such a name (and os.path would raise)
        return None
    found = program if os.sep in program else which(program)
    return None if found is None else os.path.normpath(os.path.abspath(found))


def admit(policy: AdmissionPolicy, worker: WorkerSpec, *, python: str = sys.executable,
          which: Which = shutil.which) -> Refusal | None:
    """None when `worker` may run under `policy`; else the Refusal that says which rule it breaks.
    Pure but for the file system: the program lookup (`which`) and the executor's interpreter
    (`python`) are passed in."""
    return (_environment(policy, worker)
            or _program(policy, list(worker.command), python, which, worker.workdir)
            or _paths(policy, worker))


def _environment(policy: AdmissionPolicy, worker: WorkerSpec) -> Refusal | None:
    unlisted = sorted(set(worker.env) - set(policy.job_env))
    if unlisted:
        return Refusal("environment", f"the job's env sets {', '.join(unlisted)}, which the policy's job_env "
                       f"does not list ({', '.join(policy.job_env) or 'none'}): list a variable there to "
                       "let jobs set it")
    return None


def _program(policy: AdmissionPolicy, argv: list[str], python: str, which: Which,
             workdir: str | None = None) -> Refusal | None:
    if (niced := split_nice(argv)) is not None:
        argv = niced[1]
    if not argv:
        return Refusal("executable", "the command is empty")
    program = resolve(_under(workdir, argv[0]) if os.sep in argv[0] else argv[0], which)
    if program is None:
        return Refusal("executable", f"{argv[0]!r} is not found on PATH")
    if program in {resolve(p, which) for p in policy.allowed_executables}:
        return None
    pythons = {os.path.normpath(python)} | {resolve(p, which) for p in policy.allowed_interpreters}
    if program not in pythons:
        return Refusal("executable", f"{program} is not an allowed executable or interpreter "
                       "(allowed_executables, allowed_interpreters)")
    if len(argv) >= 3 and argv[1] == "-m":
        if any(argv[2] == prefix or argv[2].startswith(prefix + ".") for prefix in policy.allowed_modules):
            return None
        return Refusal("module", f"module {argv[2]!r} is not in the allowed modules "
                       f"({', '.join(policy.allowed_modules) or 'none'})")
    if len(argv) >= 2 and not argv[1].startswith("-"):
        if _inside(_under(workdir, argv[1]), policy.allowed_script_dirs):
            return None
        return Refusal("script", f"script {argv[1]!r} is not in an allowed script directory "
                       f"({', '.join(policy.allowed_script_dirs) or 'none'})")
    return Refusal("module", f"{program} may run only `-m MODULE` or a script, not {argv[1:2] or 'nothing'}")


def _paths(policy: AdmissionPolicy, worker: WorkerSpec) -> Refusal | None:
    # `python -m` imports from the working directory first, so a workdir the job chose could hold
    # a package of an allowed module's name: for `-m`, the workdir must be a listed directory (a
    # script directory or an allowed one) even when the policy lists none; for anything else, when
    # it lists any.
    roots = (*policy.allowed_dirs, *policy.allowed_script_dirs)
    if worker.workdir is not None and (roots or _runs_module(list(worker.command))) \
            and not _inside(worker.workdir, roots):
        return Refusal("directory", f"workdir {worker.workdir!r} is not in an allowed directory "
                       f"({', '.join(roots) or 'none: a `python -m` job needs its workdir listed'})")
    if not policy.allowed_dirs:
        return None
    resume = None if worker.resume == LATEST else worker.resume  # `latest` is in checkpoint_dir
    for what, path in (("checkpoint_dir", worker.checkpoint_dir), ("resume", resume)):
        if path is not None and not _inside(_under(worker.workdir, path), policy.allowed_dirs):
            return Refusal("directory", f"{what} {path!r} is not in an allowed directory "
                           f"({', '.join(policy.allowed_dirs)})")
    return None


def _runs_module(argv: list[str]) -> bool:
    """`[nice -n N] PROGRAM -m ...`: a Python that imports its module from the working directory
    (whatever N is: the stricter workdir rule holds even where `nice` would refuse N)."""
    if argv[:2] == ["nice", "-n"] and len(argv) > 3:
        argv = argv[3:]
    return len(argv) >= 2 and argv[1] == "-m"


def _under(workdir: str | None, path: str) -> str:
    """`path` as a rank in `workdir` sees it (relative paths are the workdir's)."""
    return path if workdir is None else os.path.join(workdir, path)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    """`path` (relative ones from this process's directory) is one of `roots` or below one; `..` is
    resolved first, so it cannot climb out."""
    where = os.path.normpath(os.path.abspath(path))
    for root in roots:
        top = os.path.normpath(os.path.abspath(root))
        if where == top or where.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False
