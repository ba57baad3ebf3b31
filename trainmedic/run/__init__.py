"""Run your own training script under trainmedic on this machine, as torchrun would, and heal it.
Exits 0 when the job succeeded, 1 when it failed or was stopped, 130 on Ctrl-C (docs/run.md).

  trainmedic run --nodes 2 --nproc-per-node 2 -- python train.py --lr 3e-4
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.usage = "trainmedic run [OPTIONS] -- COMMAND [ARGS...]"
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes (default 2)")
    parser.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                        help="ranks per node (default 1)")
    parser.add_argument("--job-id", metavar="ID", help="the job's id (default: SCRIPT-NNNNNN, from the time)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in every rank's environment (the job spec's env); repeatable")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="where a restart restores from when no replica survives "
                        "(the ranks' TRAINMEDIC_CHECKPOINT_DIR)")
    parser.add_argument("--resume", metavar="CHECKPOINT",
                        help="start from this checkpoint (a file, a DCP directory, or a directory of them), "
                        "or `latest`: the newest an earlier run of this job id wrote in --checkpoint-dir; "
                        "it must be of the same model and world size (default: start at step 0)")
    parser.add_argument("--max-restarts", type=int, metavar="N",
                        help="restarts for one failure before the coordinator gives up (default: its own, 4)")
    parser.add_argument("--hang-floor-s", type=float, metavar="S",
                        help="no step for this long (at least) is a hang (default: the detector's)")
    parser.add_argument("--progress-s", type=float, default=1.0, metavar="S",
                        help="at most one step line per this many seconds (default 1)")
    parser.add_argument("--no-tee", dest="tee", action="store_false",
                        help="do not print the ranks' output (each line prefixed [rank N]) with the story")
    parser.add_argument("--prefix", help="the topic prefix (default: run-XXXXXX., a new one per run)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="what each rank runs, e.g. python train.py --lr 3e-4")


def run(args: argparse.Namespace) -> int:
    from trainmedic.run.session import run_job

    return run_job(args)
