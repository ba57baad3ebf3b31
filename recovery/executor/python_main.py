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
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import runpy
import shutil
import stat
import sys
import types
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from trainmedic.recovery.executor.core.niceness import split_nice

SHEBANG_BYTES = 512  # how much of a console script is read for its `#!` line
# The zygote's environment as it started, before its imports (torch._dynamo sets TORCHINDUCTOR_CACHE_DIR).
STARTED_WITH = dict(os.environ)


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
    """`word` names `python`: the same path, or a name beside it for the same file (a venv's
    `python3` for its `python`; another directory is another site-packages)."""
    exe = word if os.sep in word else shutil.which(word, path=path)
    if exe is None:
        return False
    exe, python = os.path.abspath(exe), os.path.abspath(python)
    return exe == python or (os.path.dirname(exe) == os.path.dirname(python)
                             and os.path.realpath(exe) == os.path.realpath(python))


def console_script(argv: Sequence[str], path: str | None, python: str = sys.executable) -> WarmTarget | None:
    """The warm form of a console script (found on `path` as exec would) whose first line is
    `#!PYTHON` exactly, and which exec would run (executable, not on a noexec mount), or None. Read
    as the rank's user, without blocking: a file that is not a regular one (a FIFO, a device) is not read."""
    niced = split_nice(argv)
    if niced is None or not niced[1]:
        return None
    nice, rest = niced
    found = rest[0] if os.sep in rest[0] else shutil.which(rest[0], path=path)
    if found is None or not os.access(found, os.X_OK):
        return None
    with _opened(found) as fd:
        if fd is None or os.fstatvfs(fd).f_flag & os.ST_NOEXEC:
            return None
        head = os.read(fd, SHEBANG_BYTES)
    if head.split(b"\n", 1)[0] != b"#!" + os.fsencode(python):  # the kernel keeps a `\r`, as here
        return None
    return WarmTarget("script", found, tuple(rest[1:]), nice)


@contextlib.contextmanager
def _opened(path: str) -> Iterator[int | None]:
    """A descriptor on `path` when it is a regular file this process may read (opened without
    blocking, whatever is swapped in under the name), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        yield None
        return
    try:
        yield fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Program:
    """A target read and checked in the rank, ready to `run`: the script's source (None for a module),
    and the entries its sys.path starts with (its directory, or the cwd for -m, then PYTHONPATH's)."""

    target: WarmTarget
    source: bytes | None
    first: tuple[str, ...]


def loaded(target: WarmTarget, env: Mapping[str, str]) -> Program | None:
    """`target` read, in this (forked) process, or None when python would run it otherwise: a script
    that is not a regular source file (a directory, a zip archive, compiled code, not there); a
    `PYTHON*` or `TORCH*` setting of `env` the zygote did not start with (read at interpreter start
    and at `import torch`); a module the zygote imported, or a sitecustomize, in the rank's own path
    entries (python would load theirs)."""
    if _setting_differs(env):
        return None
    source = None
    if target.kind == "script":
        with _opened(target.path) as fd:
            if fd is None:
                return None
            with os.fdopen(os.dup(fd), "rb") as file:
                source = file.read()
        if source.startswith(importlib.util.MAGIC_NUMBER) or target.path.endswith(".pyc") \
                or zipfile.is_zipfile(io.BytesIO(source)):
            return None
        here = os.path.dirname(os.path.realpath(target.path))
    else:
        here = os.getcwd()
    first = tuple(dict.fromkeys((here, *_entries(env.get("PYTHONPATH", "")))))
    return None if _shadowed(first) else Program(target, source, first)


# Read at interpreter start or at `import torch`: a rank whose value differs from the zygote's starts
# cold. HANDLED: what `run` applies itself, and PYTHONNOUSERSITE, which every rank and the zygote have.
READ_AT_START = ("PYTHON", "TORCH")
HANDLED = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE"})


def _setting_differs(env: Mapping[str, str]) -> bool:
    names = {name for name in (*env, *STARTED_WITH) if name.startswith(READ_AT_START)} - HANDLED
    return any(env.get(name) != STARTED_WITH.get(name) for name in names)


def _shadowed(entries: tuple[str, ...]) -> bool:
    """Whether a path entry the zygote did not have holds another file of a module it imported (top
    level), or a sitecustomize or usercustomize. A directory without __init__ is a namespace portion,
    which shadows no module."""
    new = [entry for entry in entries if entry not in sys.path]
    names = {name for name in sys.modules if "." not in name} - set(sys.builtin_module_names) - {"__main__"}
    for entry in new:
        for name in (*names, "sitecustomize", "usercustomize"):
            found = importlib.machinery.PathFinder.find_spec(name, [entry])
            if found is None or found.origin is None:
                continue
            loaded = getattr(getattr(sys.modules.get(name), "__spec__", None), "origin", None)
            if loaded is None or os.path.realpath(loaded) != os.path.realpath(found.origin):
                return True
    return False


def run(program: Program, env: Mapping[str, str]) -> None:
    """Run `program` in this (forked) process as `python` started with `env` in this directory would:
    its environment (and what the zygote's imports set in theirs), sys.argv, sys.path
    (`program.first`, then the zygote's less its PYTHONPATH's),
    a fresh __main__, stdout and stderr buffered as PYTHONUNBUFFERED says. Returns when it ends."""
    target, inherited = program.target, _entries(STARTED_WITH.get("PYTHONPATH", ""))
    imported = {name: value for name, value in os.environ.items() if name not in STARTED_WITH}
    os.environ.clear()
    os.environ.update(env)
    for name, value in imported.items():  # what the preloaded imports set, as they would have in the rank
        os.environ.setdefault(name, value)
    _fresh_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
    sys.path[:] = [*program.first, *(p for p in sys.path if p not in inherited and p not in program.first)]
    sys.argv = [target.path, *target.args]  # for -m, argv[0] becomes the module's file, as python sets it
    sys.orig_argv = [sys.executable, *(("-m",) if target.kind == "module" else ()), target.path, *target.args]
    if program.source is None:
        runpy.run_module(target.path, run_name="__main__", alter_sys=True)
        return
    # As python: the path joined to the cwd, not normalised (`./train.py` stays `/cwd/./train.py`).
    full = target.path if os.path.isabs(target.path) else os.path.join(os.getcwd(), target.path)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=full, __cached__=None, __builtins__=builtins, __spec__=None,
                         __package__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", full))
    sys.modules["__main__"] = main
    exec(compile(program.source, full, "exec", dont_inherit=True), main.__dict__)


def _entries(pythonpath: str) -> list[str]:
    return [os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p]


def _fresh_stdio(*, unbuffered: bool) -> None:
    """New sys.stdout and sys.stderr on descriptors 1 and 2, as interpreter start makes them: block
    buffered to a file, stderr line buffered, neither buffered when unbuffered (python -u)."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=old.encoding,
                                  errors=old.errors, line_buffering=name == "stderr" and not unbuffered,
                                  write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
