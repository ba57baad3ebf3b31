"""Run your own training script under trainmedic on this machine, as torchrun would, and heal it.

  trainmedic run --nodes 2 --nproc-per-node 2 -- python train.py --lr 3e-4

starts (or reuses, when one answers) the local Kafka broker, creates a topic prefix of this run's own
with every role's ACLs, generates the keys that are missing in a folder of the run's own
($TRAINMEDIC_HOME/run/keys: `trainmedic job stop JOB --keys-dir` it), and starts the detector, the
coordinator and NODES `trainmedic node` processes (host agent, synthetic GPUs, executor),
each a real service; their logs are in $TRAINMEDIC_HOME/run/JOB/logs/. Once the nodes are up it writes
the job spec (command: what follows `--`; workdir: this directory; NODES x NPROC ranks; sizes 1 to
NODES, so the coordinator can shrink the job onto the nodes left) to $TRAINMEDIC_HOME/run/JOB/job.yaml,
submits it signed with the operator key, and prints the job's progress: its state, its steps (at most
one line per --progress-s), every incident and every recovery. It ends with the job: exit status 0
when it succeeded (every rank exited 0), 1 when it failed or was stopped. Ctrl-C (or SIGTERM) stops
the job and everything `run` started, and exits 130 (143).

The script is a plain data-parallel torch script that adopts the worker runtime
(`from trainmedic.runtime import init_from_env`, docs/adopting.md): it joins the process
group, restores from a surviving replica after a restart and reports its steps. Each rank's
output goes to $TRAINMEDIC_HOME-jobs/NODE/JOB/logs/ (`trainmedic job logs JOB --follow`);
`trainmedic job status JOB` shows its progress, from any directory (the run records its topic prefix).
One run per TRAINMEDIC_HOME at a time.
The same job runs on a real cluster with `trainmedic job submit job.yaml`, once its nodes name
the cluster's. See docs/run.md.

The executors here admit the command's program (--allowed-executables), this directory as the
job's workdir (--allowed-script-dirs) and the variables --env sets (--job-env: PYTHONPATH, LD_*
and the like are refused otherwise), and each node is simulated
on this machine: its GPUs are synthetic, and its ranks run as local processes, gloo on CPU (NCCL
when the script finds CUDA). Environment: TRAINMEDIC_KAFKA_BOOTSTRAP (a broker to use instead of the
local one), TRAINMEDIC_BROKER_PORT (the local broker's port, default 9092), TRAINMEDIC_HOME
(default ~/.local/state/trainmedic).
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
    parser.add_argument("--max-restarts", type=int, metavar="N",
                        help="restarts for one failure before the coordinator gives up (default: its own, 4)")
    parser.add_argument("--hang-floor-s", type=float, metavar="S",
                        help="no step for this long (at least) is a hang (default: the detector's)")
    parser.add_argument("--progress-s", type=float, default=1.0, metavar="S",
                        help="at most one step line per this many seconds (default 1)")
    parser.add_argument("--prefix", help="the topic prefix (default: run-XXXXXX., a new one per run)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="what each rank runs, e.g. python train.py --lr 3e-4")


def run(args: argparse.Namespace) -> int:
    from trainmedic.run.session import run_job

    return run_job(args)
