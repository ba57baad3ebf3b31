"""Which rank commands a warm launcher runs in a fork, and how a forked rank runs them exactly as a new
`python` would (docs/executor.md, "Job launchers: warm start and containment").

Three forms run warm, each only with this interpreter (another has its own site-packages):
`PYTHON -m MODULE ARGS`, `PYTHON SCRIPT ARGS` (a plain source file), and a console script whose
`#!` line is exactly this interpreter (pip's entry points). Anything else, or one of these that
Python would treat otherwise (a directory or a zip archive as the script, a file that is not there),
is exec'd: `python` itself then does what it does. The standard library only (and the core's
`nice -n` reading): the zygote imports it.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import pkgutil
import runpy
import shutil
import stat
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainmedic.recovery.executor.core.niceness import split_nice

SHEBANG_BYTES = 512  # how much of a console script is read for its `#!` line


@dataclass(frozen=True)
class WarmTarget:
    """A rank command run in a fork: `module` (`python -m`) or `script` (a file run as `python PATH`,
    `path` as given), with its arguments, at a niceness."""

    kind: str
    path: str
    args: tuple[str, ...]
    nice: int = 0

    def command(self) -> str:
        """How ps shows it: `python -m MODULE ARGS` or `python PATH ARGS`."""
        return " ".join(("python", *(("-m",) if self.kind == "module" else ()), self.path, *self.args))


def warm_target(argv: Sequence[str], python: str = sys.executable,
                path: str | None = None) -> WarmTarget | None:
    """The warm form of `PYTHON -m MODULE ARGS` or `PYTHON SCRIPT ARGS` (PYTHON found on `path` as exec
    would), or None: read from the words alone (a console script's file is read by `console_script`)."""
    niced = split_nice(argv)
    if niced is None:
        return None
    nice, rest = niced
    if len(rest) < 2 or not _is_python(rest[0], python, path):
        return None
    if rest[1] == "-m":
        return WarmTarget("module", rest[2], tuple(rest[3:]), nice) if len(rest) > 2 else None
    if rest[1].startswith("-") or not rest[1]:
        return None  # an interpreter option: exec'd, as python reads it
    return WarmTarget("script", rest[1], tuple(rest[2:]), nice)


def _is_python(word: str, python: str, path: str | None) -> bool:
    exe = word if os.sep in word else shutil.which(word, path=path)
    return exe is not None and os.path.abspath(exe) == os.path.abspath(python)


def console_script(argv: Sequence[str], path: str | None, python: str = sys.executable) -> WarmTarget | None:
    """The warm form of a console script (found on `path` as exec would) whose first line is
    `#!PYTHON` exactly, or None. Read as the rank's user: a file that is not a regular one (a FIFO, a
    device) is not read."""
    niced = split_nice(argv)
    if niced is None or not niced[1]:
        return None
    nice, rest = niced
    found = rest[0] if os.sep in rest[0] else shutil.which(rest[0], path=path)
    if found is None:
        return None
    try:
        fd = os.open(found, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, SHEBANG_BYTES)
    finally:
        os.close(fd)
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first != b"#!" + os.fsencode(python):
        return None
    return WarmTarget("script", found, tuple(rest[1:]), nice)


def runs_plainly(target: WarmTarget) -> bool:
    """Whether a fork runs `target` as python would: a module, or a script that is a readable plain
    file (not a directory or zip archive, which python runs as a path entry's __main__)."""
    if target.kind == "module":
        return True
    return os.path.isfile(target.path) and os.access(target.path, os.R_OK) \
        and pkgutil.get_importer(target.path) is None


def run(target: WarmTarget, env: Mapping[str, str]) -> None:
    """Run `target` in this (forked) process as `python` started with `env` in this directory would:
    its environment, sys.argv, sys.path (the script's directory or the cwd first, then PYTHONPATH's),
    a fresh __main__, stdout and stderr buffered as PYTHONUNBUFFERED says. Returns when it ends."""
    inherited = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(env)
    _fresh_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
    first = os.getcwd() if target.kind == "module" else os.path.dirname(os.path.realpath(target.path))
    sys.path[:] = [first, *_entries(env.get("PYTHONPATH", "")),
                   *(p for p in sys.path if p not in _entries(inherited))]
    if target.kind == "module":
        sys.argv = [target.path, *target.args]  # argv[0] becomes the module's file, as -m sets it
        runpy.run_module(target.path, run_name="__main__", alter_sys=True)
        return
    sys.argv = [target.path, *target.args]
    full = os.path.abspath(target.path)
    with open(full, "rb") as file:
        source = file.read()
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=full, __cached__=None, __builtins__=builtins, __spec__=None,
                         __package__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", full))
    sys.modules["__main__"] = main
    exec(compile(source, full, "exec", dont_inherit=True), main.__dict__)


def _entries(pythonpath: str) -> list[str]:
    return [os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p]


def _fresh_stdio(*, unbuffered: bool) -> None:
    """New sys.stdout and sys.stderr on descriptors 1 and 2, as interpreter start makes them: block
    buffered to a file, stderr line buffered, neither buffered when unbuffered (python -u)."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=old.encoding,
                                  errors=old.errors, line_buffering=name == "stderr",
                                  write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
