"""Time to first step after each fault: the HSDP transformer side by side with the DDP MLP.

Runs `trainmedic demo` twice on this machine, one after the other, with the same nodes,
ranks and step time: `--model mlp` (data parallel, whole-state snapshots) and `--model
gpt-hsdp` (a small GPT-style transformer sharded within a node, replicated across nodes,
restored per shard). Per fault it prints each run's time from the injection to the job's
first completed step after the repair, the ratio (the issue's target: within 1.5x), the
steps lost, and where the HSDP ranks took their state from; then each run's loss check
against an uninterrupted run.

    python bench/hsdp_vs_ddp_demo.py [--nodes 4] [--ranks-per-node 2] [--json OUT]

Each demo starts and stops the local broker unless TRAINMEDIC_KAFKA_BOOTSTRAP names one and
empties $TRAINMEDIC_HOME/demo/ first; their output goes to $TRAINMEDIC_HOME/bench-hsdp-vs-ddp/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from trainmedic.bus.settings import home


def run_demo(model: str, output: Path, args: argparse.Namespace) -> dict:
    output.mkdir(parents=True, exist_ok=True)
    log = output / f"{model}.log"
    print(f"running `trainmedic demo --model {model}` (output in {log}) ...", flush=True)
    began = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "trainmedic.cli", "demo", "--model", model, "--nodes", str(args.nodes),
             "--ranks-per-node", str(args.ranks_per_node)],
            stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    report = home() / "demo" / "report.json"  # the demo empties its folder first: this run's
    if not report.exists():
        raise SystemExit(f"the {model} demo wrote no report (exit {done.returncode}); see {log}")
    print(f"  done in {time.monotonic() - began:.0f}s, exit {done.returncode}", flush=True)
    return {**json.loads(report.read_text()), "exit": done.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    runs = {model: run_demo(model, home() / "bench-hsdp-vs-ddp", args) for model in ("mlp", "gpt-hsdp")}
    ddp = {f["name"]: f for f in runs["mlp"]["faults"]}
    hsdp = {f["name"]: f for f in runs["gpt-hsdp"]["faults"]}
    print(f"\n{args.nodes} nodes x {args.ranks_per_node} ranks, gloo on CPU, this machine "
          f"({os.cpu_count()} cores); resume s: the fault -> the first completed step after the repair\n")
    rows = [("fault", "DDP resume s", "HSDP resume s", "HSDP/DDP", "lost DDP/HSDP")]
    for name in [n for n in ddp if n in hsdp]:
        a, b = ddp[name]["time_to_resume_s"], hsdp[name]["time_to_resume_s"]
        ratio = f"{b / a:.2f}x" if a and b else "-"
        rows.append((name, str(a), str(b), ratio, f"{ddp[name]['steps_lost']}/{hsdp[name]['steps_lost']}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print()
    for name, fault in hsdp.items():
        if fault.get("restored"):
            print(f"HSDP {name}: {fault['restored']}")
    for model, run in runs.items():
        losses = run["losses"]
        verdict = "match" if losses["matches"] else "NO MATCH"
        print(f"{model} losses: {losses['steps']} steps of {losses['generations']} generations, largest "
              f"difference from an uninterrupted run {losses['max_abs_diff']:.1e}: {verdict}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    return 0 if all(run["exit"] == 0 for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
