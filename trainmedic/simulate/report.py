"""A comparison written out: the table an operator reads, JSON and CSV for notebooks, a PNG plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from trainmedic.simulate.progress import LOSSES
from trainmedic.simulate.run import Report


def table(report: Report) -> str:
    """The comparison as text: one row per policy, means ± 95 % confidence over the seeds."""
    s = report.scenario
    gpus = s.cluster.nodes * s.cluster.gpus_per_node
    seeds = report.seeds
    lines = [f"{s.name}: {s.cluster.nodes} nodes x {s.cluster.gpus_per_node} GPUs ({gpus:,} GPUs), "
             f"{len(s.jobs)} job(s), {s.duration_days:g} days; {len(seeds)} seed(s) "
             f"({seeds[0]}..{seeds[-1]}), {sum(report.faults) / len(seeds):,.0f} faults per seed",
             "", f"{'policy':<12} {'ETTR':>15} {'WAF vs restart-all':>19} {'goodput GPU-h':>14}"]
    for name, summary in report.policies.items():
        m, ci = summary.mean, summary.ci95
        lines.append(f"{name:<12} {m['ettr']:>8.4f} ± {ci['ettr']:.4f} {m['ratio_to_restart_all']:>11.3f}x "
                     f"± {ci['ratio_to_restart_all']:.3f} {m['goodput_gpu_h']:>14,.0f}")
    lines += ["", "GPU-hours lost, by cause (mean per seed):",
              f"{'policy':<12} " + " ".join(f"{cause:>13}" for cause in LOSSES)]
    for name, summary in report.policies.items():
        lines.append(f"{name:<12} " + " ".join(f"{summary.mean['lost.' + c]:>13,.0f}" for c in LOSSES))
    gave_up = {name: sum(run.gave_up for run in summary.runs) for name, summary in report.policies.items()}
    if any(gave_up.values()):
        lines.append("")
        lines += [f"{name}: the coordinator gave up on a job {n} time(s) over the seeds (the wait for a "
                  f"person: `person`)" for name, n in gave_up.items() if n]
    return "\n".join(lines)


def as_json(report: Report) -> dict:
    """`{"scenario": …, "policies": {POLICY: {"ettr": …, "waf_accumulated": …, "ratio_to_restart_all": …,
    "lost_gpu_hours": {CAUSE: …}, …}}}`: means over the seeds, with their 95 % half-widths."""
    s = report.scenario
    return {
        "scenario": {"name": s.name, "description": s.description, "duration_days": s.duration_days,
                     "nodes": s.cluster.nodes, "gpus": s.cluster.nodes * s.cluster.gpus_per_node,
                     "jobs": len(s.jobs), "seeds": report.seeds, "faults_per_seed": report.faults},
        "policies": {
            name: {"ettr": m.mean["ettr"], "ettr_ci95": m.ci95["ettr"],
                   "waf_accumulated": m.mean["waf_accumulated"],
                   "ratio_to_restart_all": m.mean["ratio_to_restart_all"],
                   "ratio_ci95": m.ci95["ratio_to_restart_all"],
                   "goodput_gpu_hours": m.mean["goodput_gpu_h"],
                   "lost_gpu_hours": {c: m.mean[f"lost.{c}"] for c in LOSSES},
                   "gave_up": sum(run.gave_up for run in m.runs)}
            for name, m in report.policies.items()},
    }


def write_csv(report: Report, path: Path) -> None:
    """The accumulated WAF over time, one row per policy, seed and sample."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["policy", "seed", "hours", "waf_accumulated"])
        for name, summary in report.policies.items():
            for seed, run in zip(report.seeds, summary.runs, strict=True):
                writer.writerows([name, seed, f"{t / 3600:.4f}", f"{waf:.6e}"] for t, waf in run.timeline)


def plot(report: Report, path: Path) -> None:
    """Accumulated WAF over time, every policy (mean over the seeds), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    for name, summary in report.policies.items():
        runs = summary.runs
        hours = [t / 3600 / 24 for t, _ in runs[0].timeline]
        mean = [sum(run.timeline[i][1] for run in runs) / len(runs) for i in range(len(hours))]
        axes.plot(hours, mean, label=f"{name} ({summary.mean['ratio_to_restart_all']:.2f}x)")
    axes.set_xlabel("days")
    axes.set_ylabel("accumulated WAF (weighted FLOP)")
    axes.set_title(f"{report.scenario.name}: accumulated WAF, mean of {len(report.seeds)} seed(s)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write(report: Report, directory: Path) -> dict[str, Path]:
    """Every output into `directory`: NAME.txt, NAME.json, NAME.csv and NAME.png."""
    directory.mkdir(parents=True, exist_ok=True)
    name = report.scenario.name
    paths = {kind: directory / f"{name}.{kind}" for kind in ("txt", "json", "csv", "png")}
    paths["txt"].write_text(table(report) + "\n")
    paths["json"].write_text(json.dumps(as_json(report), indent=2) + "\n")
    write_csv(report, paths["csv"])
    plot(report, paths["png"])
    return paths
