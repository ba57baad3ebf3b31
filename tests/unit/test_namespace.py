"""One namespace: every module is importable only as `trainmedic.…`, so a user's own `schemas` or
`recovery` package never shadows trainmedic's, in a training script or in a service."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

OLD_NAMES = ("schemas", "bus", "producers", "streams", "recovery", "ops")


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}  # no PYTHONPATH: what the installed package gives
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_users_own_packages_do_not_shadow_trainmedics(tmp_path: Path) -> None:
    for name in OLD_NAMES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'user'\nNAME = {name!r}\n")
    code = (
        "import schemas, recovery, streams\n"
        "from trainmedic.runtime import WorkerEnv, init_from_env\n"
        "import trainmedic.schemas, trainmedic.runtime.env, trainmedic.streams.core\n"
        "assert schemas.OWNER == recovery.OWNER == streams.OWNER == 'user'\n"
        "assert trainmedic.schemas.WorkerSpec and callable(init_from_env) and WorkerEnv\n"
        "print(trainmedic.schemas.__file__)\n"
    )
    result = python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(tmp_path) not in result.stdout


def test_the_old_top_level_names_are_not_importable(tmp_path: Path) -> None:
    for name in OLD_NAMES:
        result = python(f"import {name}", tmp_path)
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, (name, result.stderr)


def test_no_module_imports_an_old_name() -> None:
    wrong = []
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    for path in (ROOT / name for name in files.stdout.split()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name and name.split(".")[0] in OLD_NAMES]
    assert not wrong, "\n".join(wrong)
