"""Simulate a cluster over days under a failure trace, once per recovery policy (restart-all, elastic,
trainmedic) on the same faults, and compare ETTR, accumulated WAF, goodput and the GPU-hours lost
by cause; deterministic for the seeds given (docs/simulation.md).

  trainmedic simulate unicron-128                    (a bundled scenario; --list shows them)
  trainmedic simulate my-cluster.yaml --seeds 10 --out results/
  trainmedic simulate llama3-16k --policies trainmedic elastic --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

SCENARIOS = Path(__file__).parent / "scenarios"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("scenario", nargs="?", metavar="NAME|FILE.yaml",
                        help="a bundled scenario's name, or a scenario file (docs/simulation.md, Scenarios)")
    parser.add_argument("--list", action="store_true", help="list the bundled scenarios and exit")
    parser.add_argument("--seed", type=int, default=1, help="the first seed (default %(default)s)")
    parser.add_argument("--seeds", type=int, metavar="K",
                        help="how many seeds, from --seed on (default: the scenario's `seeds`)")
    parser.add_argument("--policies", nargs="+", metavar="POLICY",
                        help="restart-all, elastic, trainmedic (default: all; restart-all always runs, "
                        "as the baseline of the ratios)")
    parser.add_argument("--days", type=float, help="simulate this many days instead of the scenario's")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for NAME.txt/.json/.csv/.png (default $TRAINMEDIC_HOME/simulate)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the JSON result here")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from trainmedic.bus.settings import home
    from trainmedic.simulate import report, run, scenario

    if args.list:
        for path in sorted(SCENARIOS.glob("*.yaml")):
            found = scenario.load(path)
            print(f"{path.stem:<14} {found.description.splitlines()[0] if found.description else ''}")
        return 0
    if args.scenario is None:
        print("trainmedic simulate: name a scenario (--list shows the bundled ones) or a YAML file",
              file=sys.stderr)
        return 2
    path = Path(args.scenario)
    if not path.suffix:
        path = SCENARIOS / f"{args.scenario}.yaml"
    unknown = [p for p in args.policies or () if p not in run.POLICIES]
    if unknown:
        print(f"trainmedic simulate: unknown policy {', '.join(unknown)} (known: {', '.join(run.POLICIES)})",
              file=sys.stderr)
        return 2
    try:
        chosen = scenario.load(path)
        if args.days is not None:
            chosen = scenario.Scenario.model_validate({**chosen.model_dump(), "duration_days": args.days})
    except FileNotFoundError:
        known = ", ".join(p.stem for p in sorted(SCENARIOS.glob("*.yaml")))
        print(f"trainmedic simulate: no scenario {args.scenario!r}: not a file, nor a bundled one ({known})",
              file=sys.stderr)
        return 2
    except (ValidationError, ValueError, OSError) as err:
        print(f"trainmedic simulate: {path}: {err}", file=sys.stderr)
        return 2
    seeds = list(range(args.seed, args.seed + (args.seeds or chosen.seeds)))
    began = time.monotonic()
    try:
        result = run.compare(chosen, seeds, args.policies or tuple(run.POLICIES), progress=_Bar().show)
    except ValueError as err:  # a replayed log that cannot be read, an unknown mix or category
        print(f"\ntrainmedic simulate: {err}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    print(report.table(result))
    paths = report.write(result, args.out or home() / "simulate")
    if args.json is not None:
        args.json.write_text(paths["json"].read_text())
        paths["json (copy)"] = args.json
    print(f"\nsimulated in {time.monotonic() - began:.1f} s; wrote " +
          ", ".join(str(p) for p in paths.values()))
    return 0


class _Bar:
    """A progress bar on stderr: redrawn in place on a terminal, a line per 10 % otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = -1

    def show(self, what: str, done: float) -> None:
        percent = int(done * 100)
        if self.tty:
            bar = "#" * (percent // 4)
            print(f"\r[{bar:<25}] {percent:3d}% {what:<28}", end="", file=sys.stderr, flush=True)
        elif percent // 10 != self.last // 10:
            print(f"{percent:3d}% {what}", file=sys.stderr, flush=True)
        self.last = percent
