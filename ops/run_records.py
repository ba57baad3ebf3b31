"""Where each `trainmedic run` on this machine records its deployment (topic prefix and broker), so that
`job`, `incidents` and `nodes` find the run they are asked about without an exported prefix (docs/run.md)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunRecord:
    job: str
    prefix: str
    bootstrap: str
    started: float


def record_path(home: Path, job: str) -> Path:
    return home / "run" / job / "deployment.json"


def record_run(home: Path, job: str, prefix: str, bootstrap: str, started: float) -> None:
    """Write the run's record (atomically: a reader never sees half of one)."""
    path = record_path(home, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(RunRecord(job, prefix, bootstrap, started))), encoding="utf-8")
    os.replace(partial, path)


def find_run(home: Path, job: str | None = None) -> RunRecord | None:
    """The record of `job`'s run, else (no job named) the newest run's; None when there is none."""
    paths = [record_path(home, job)] if job else (home / "run").glob("*/deployment.json")
    records = []
    for path in paths:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
            records.append(RunRecord(str(found["job"]), str(found["prefix"]), str(found["bootstrap"]),
                                     float(found["started"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no record, or one that is not ours to read
    return max(records, key=lambda record: record.started, default=None)
