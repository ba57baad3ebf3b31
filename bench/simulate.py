"""How long `trainmedic simulate` takes, per policy, on a bundled scenario (default rsc-100k: 12,500
nodes, 54 jobs, 30 days, ~8,800 faults), and what each policy trains, side by side in one run on the
same trace. The target (issue 15): rsc-100k, all policies, under a minute on this machine.

Run: .venv/bin/python bench/simulate.py [--scenario NAME] [--days D] [--seed N]
"""

from __future__ import annotations

import argparse
import time

from trainmedic.simulate import run, scenario
from trainmedic.simulate.cli import SCENARIOS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="rsc-100k")
    parser.add_argument("--days", type=float, help="instead of the scenario's duration")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    chosen = scenario.load(SCENARIOS / f"{args.scenario}.yaml")
    if args.days is not None:
        chosen = chosen.model_copy(update={"duration_days": args.days})
    began = time.perf_counter()
    faults = run.trace(chosen, args.seed)
    drawn = time.perf_counter() - began
    gpus = chosen.cluster.nodes * chosen.cluster.gpus_per_node
    print(f"{chosen.name}: {chosen.cluster.nodes:,} nodes ({gpus:,} GPUs), {len(chosen.jobs)} jobs, "
          f"{chosen.duration_days:g} days, seed {args.seed}: {len(faults):,} faults drawn in "
          f"{drawn * 1000:.0f} ms")
    print(f"{'policy':<12} {'wall s':>8} {'ms/fault':>9} {'ETTR':>7} {'WAF vs restart-all':>19}")
    total, base = drawn, None
    for policy in run.POLICIES:
        began = time.perf_counter()
        outcome = run.simulate(chosen, policy, faults)
        wall = time.perf_counter() - began
        total += wall
        base = base or outcome.waf_accumulated
        print(f"{policy:<12} {wall:>8.1f} {wall * 1000 / max(1, len(faults)):>9.2f} {outcome.ettr:>7.4f} "
              f"{outcome.waf_accumulated / base:>18.3f}x")
    print(f"all policies: {total:.1f} s (target: under 60 s for rsc-100k)")


if __name__ == "__main__":
    main()
