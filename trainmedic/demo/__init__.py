"""The local demo: a real Kafka broker, every trainmedic service, and a CPU training job that is
broken on purpose (kill -9, Xid 79, a hang, a link flap, then a grow) and heals by itself.
Exits 0 only if every fault healed, no step was lost (gpt-fsdp: none its checkpoint holds) and every
loss matched an uninterrupted run's; docs/demo.md.
"""

from __future__ import annotations

import argparse

MODELS = ("mlp", "gpt-hsdp", "gpt-fsdp")  # the demo's jobs: `trainmedic.demo.train --model`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes (default 4, at least 2)")
    parser.add_argument("--model", choices=MODELS, default="mlp",
                        help="the job: mlp, data parallel (default); gpt-hsdp, a small transformer with "
                        "HSDP; gpt-fsdp, the same with FSDP2 over every rank. Every logged loss is checked "
                        "against an uninterrupted run's")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="training ranks per node (default 2)")
    parser.add_argument("--step-s", type=float, default=0.25,
                        help="length of one training step (default 0.25)")
    parser.add_argument("--fault-timeout-s", type=float, default=120.0,
                        help="how long to wait for the job to heal after each fault (default 120)")
    parser.add_argument("--alertmanager", metavar="URL",
                        help="also run the alert bridge to this Alertmanager and report when each "
                        "incident's alert appeared and cleared")
    parser.add_argument("--observe", action="store_true",
                        help="also run Prometheus (every service scraped, the healer's alert rules) and "
                        "Alertmanager from Debian's packages (`make prometheus alertmanager`), print their "
                        "URLs, and report when the healer's own metrics showed each fault")
    parser.add_argument("--in-process", action="store_true",
                        help="the ranks train under rt.run: a survivor of a peer's failure keeps its process "
                        "(docs/executor.md, \"Survivors keep their processes\")")
    parser.add_argument("--only", action="append", default=[], metavar="FAULT",
                        help="run only these faults (kill, xid79, hang, flap, and grow, which "
                        "follows xid79); repeatable")


def run(args: argparse.Namespace) -> int:
    from trainmedic.demo.runner import run_demo

    return run_demo(args)
