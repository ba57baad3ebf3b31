"""The layering is a checked contract: import-linter's contracts in pyproject.toml hold for the
tree, and the same check fails on a copy of the tree with one upward import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("common", "schemas", "bus", "producers", "streams", "recovery", "ops", "trainmedic")
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


# One broken import a contract: the file it is added to, the line, and the import the check must name.
BREAKS = [
    ("bus/settings.py", "from trainmedic.streams import pipeline  # upward: bus knows no service",
     "trainmedic.bus.settings -> trainmedic.streams.pipeline"),
    ("streams/core/hang.py", "import confluent_kafka  # a pure core knows no Kafka",
     "trainmedic.streams.core.hang -> confluent_kafka"),
    ("recovery/executor/core/decide.py",
     "from trainmedic.recovery.executor import supervisor  # the core starts no process",
     "trainmedic.recovery.executor.core.decide -> trainmedic.recovery.executor.supervisor"),
    ("recovery/coordinator/core/fold.py",
     "from trainmedic.recovery.coordinator import kafka_adapter  # knows no Kafka",
     "trainmedic.recovery.coordinator.core.fold -> trainmedic.recovery.coordinator.kafka_adapter"),
    ("trainmedic/runtime/hook.py", "import confluent_kafka  # a rank's process holds no Kafka client",
     "trainmedic.runtime.hook -> confluent_kafka"),
    ("trainmedic/runtime/reform.py", "from trainmedic.bus import outbox  # nor the bus",
     "trainmedic.runtime.reform -> trainmedic.bus.outbox"),
    ("recovery/executor/supervisor.py", "from trainmedic.producers import agent  # no producer in recovery",
     "trainmedic.recovery.executor.supervisor -> trainmedic.producers.agent"),
    ("common/timespan.py", "import torch  # every part imports these helpers",
     "trainmedic.common.timespan -> torch"),
    ("streams/live_config.py", "from trainmedic.streams import ordering  # a circle: ordering imports this",
     "No cycles are allowed in trainmedic.streams"),
]


@pytest.mark.parametrize(("module", "line", "named"), BREAKS, ids=[row[0] for row in BREAKS])
def test_a_broken_contract_fails_the_check(tmp_path: Path, module: str, line: str, named: str) -> None:
    tree = copy_tree(tmp_path)
    with open(tree / module, "a") as source:
        source.write(f"\n{line}\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert named in said(result)
