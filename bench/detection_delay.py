"""Detection delay per category over the scenario recordings (tests/scenarios).

For every incident opened: ts - first_ts (the incident's own view: decision time minus its
earliest evidence) and, where the scenario knows when the fault happened, ts - fault_ts
against the scenario's target.

    python bench/detection_delay.py
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from trainmedic.streams.replay import read_events, replay

SCENARIOS = Path(__file__).resolve().parent.parent / "tests" / "scenarios"


def rows() -> list[tuple]:
    out = []
    for expected_path in sorted(SCENARIOS.glob("*.expected.json")):
        name = expected_path.name.removesuffix(".expected.json")
        expected = json.loads(expected_path.read_text())["incidents"]
        with (SCENARIOS / f"{name}.jsonl").open() as lines:
            incidents = replay(read_events(lines, io.StringIO()))
        for incident, want in zip(incidents, expected, strict=False):
            if incident.status != "open":
                continue
            fault = want.get("fault_ts")
            out.append((incident.category, name, incident.ts - incident.first_ts,
                        None if fault is None else incident.ts - fault, want.get("max_delay_s")))
    return out


def main() -> None:
    print(f"{'category':<15} {'scenario':<27} {'ts-first_ts':>11} {'ts-fault':>9} {'target':>7}")
    for category, name, own, fault, target in sorted(rows()):
        fault_s = "" if fault is None else f"{fault:.2f}"
        target_s = "" if target is None else f"<={target:.1f}"
        print(f"{category:<15} {name:<27} {own:>11.2f} {fault_s:>9} {target_s:>7}")


if __name__ == "__main__":
    main()
