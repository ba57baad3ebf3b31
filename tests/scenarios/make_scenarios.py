"""Make the scenario recordings: `python tests/scenarios/make_scenarios.py [NAME ...]`.

Each scenario writes NAME.jsonl (telemetry, as a producer would send it) and
NAME.expected.json (the incidents replay must emit, in order, with the fault's time and the
detection delay allowed). The recordings are committed: they are data; this is how they
were made. The recipes are in recipes/, a module per family of faults, on the small simulated
cluster of sim.py.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from recipes import SCENARIOS  # noqa: E402

HERE = Path(__file__).parent


def write(name: str, made: dict) -> None:
    lines = [json.dumps(event, separators=(",", ":")) for event in made["events"]]
    bad_at = []
    for n, bad in enumerate(made.get("bad_lines", ())):
        at = (n + 1) * len(lines) // (len(made["bad_lines"]) + 1) + n
        lines.insert(at, bad)
        bad_at.append(at + 1)
    (HERE / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    expected = {"description": SCENARIOS[name].__doc__.split("\n\n")[0].strip(),
                "incidents": made["incidents"]}
    if bad_at:
        expected["bad_lines"] = bad_at
    (HERE / f"{name}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")


def main(names: list[str]) -> None:
    for name in names or SCENARIOS:
        write(name, SCENARIOS[name](random.Random(name)))
        print(name)


if __name__ == "__main__":
    main(sys.argv[1:])
