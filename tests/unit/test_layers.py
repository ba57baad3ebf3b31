"""The layering is a checked contract: import-linter's contracts in pyproject.toml hold for the
tree, and the same check fails on a copy of the tree with one upward import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("schemas", "bus", "producers", "streams", "recovery", "ops", "trainmedic")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # before the editable install's finder
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def said(result: subprocess.CompletedProcess) -> str:
    """lint-imports' report with its line wrapping undone."""
    return " ".join(result.stdout.split())


def copy_tree(dest: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", dest)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, symlinks=True,  # trainmedic/ links the others
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_every_import_points_down() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in said(result)


def test_an_upward_import_fails_the_check(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    with open(tree / "bus" / "settings.py", "a") as module:
        module.write("\nfrom trainmedic.streams import pipeline  # upward: bus knows no service\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "trainmedic.bus.settings -> trainmedic.streams.pipeline" in said(result)


def test_a_kafka_import_in_a_pure_core_fails_the_check(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    with open(tree / "streams" / "core" / "hang.py", "a") as module:
        module.write("\nimport confluent_kafka  # a pure core knows no Kafka\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "trainmedic.streams.core.hang -> confluent_kafka" in said(result)


def test_an_adapter_import_in_the_executors_core_fails_the_check(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    with open(tree / "recovery" / "executor" / "core" / "decide.py", "a") as module:
        module.write("\nfrom trainmedic.recovery.executor import supervisor  # the core starts no process\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert ("trainmedic.recovery.executor.core.decide -> trainmedic.recovery.executor.supervisor"
            in said(result))


def test_an_adapter_import_in_the_coordinators_core_fails_the_check(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    with open(tree / "recovery" / "coordinator" / "core" / "fold.py", "a") as module:
        module.write("\nfrom trainmedic.recovery.coordinator import kafka_adapter  # knows no Kafka\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert ("trainmedic.recovery.coordinator.core.fold -> trainmedic.recovery.coordinator.kafka_adapter"
            in said(result))
