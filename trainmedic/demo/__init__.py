"""The local demo: a real Kafka broker, every trainmedic service, and a CPU training job that
gets broken on purpose and heals by itself.

It starts the broker (unless TRAINMEDIC_KAFKA_BOOTSTRAP names one), the detector, the
coordinator and one `trainmedic node` per simulated node (host agent, synthetic GPUs and
executor), submits a job of NODES x RANKS real torch.distributed (gloo) ranks, and then
injects, one after the other:

  kill -9 of a rank          -> process_exit, SEV2: restart in place
  Xid 79 on one node's GPU   -> gpu_lost, SEV1: node isolated, job re-planned without it
  a rank that stops stepping -> hang, SEV2: restart
  a link that flaps          -> link_flap, SEV3: reattempt in place
  then the Xid 79 node is uncordoned once its incident resolved: the job grows back onto it

The job is a data-parallel MLP, or with --model gpt-hsdp a small GPT-style transformer trained
with HSDP (sharded within a node, replicated across nodes): its ranks restore their shards from
the nearest surviving copy, resharded when the world size changes, and at the end the demo
checks that every logged loss equals an uninterrupted run's.

With --alertmanager URL it also runs the alert bridge and reports, per fault, how soon the
incident's alert appeared in Alertmanager and whether it cleared when the incident resolved.
With --observe it also runs Prometheus, scraping every service, and (unless --alertmanager names
one) an Alertmanager, from Debian's packages, prints their URLs, and reports, per fault, when
the healer's own metrics counted its incident and its plan (docs/metrics.md).

It narrates steps, incidents and recovery actions as they happen, prints a summary table,
writes $TRAINMEDIC_HOME/demo/report.json, stops everything it started and exits 0 only if
every fault healed.
"""

from __future__ import annotations

import argparse

MODELS = ("mlp", "gpt-hsdp")  # the demo's jobs: `trainmedic.demo.train --model`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes (default 4, at least 2)")
    parser.add_argument("--model", choices=MODELS, default="mlp",
                        help="the job: mlp, data parallel (default); gpt-hsdp, a small transformer with "
                        "HSDP, losses checked against an uninterrupted run")
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
    parser.add_argument("--only", action="append", default=[], metavar="FAULT",
                        help="run only these faults (kill, xid79, hang, flap, and grow, which "
                        "follows xid79); repeatable")


def run(args: argparse.Namespace) -> int:
    from trainmedic.demo.runner import run_demo

    return run_demo(args)
