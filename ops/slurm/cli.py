"""Run a job under Slurm and tell Slurm what trainmedic learns about its nodes (docs/slurm.md).

  sbatch SPEC --nodes N [--spares S] [-- NODE_ARGS]   write the batch script (--submit: and submit it)
  run SPEC [--spares S] [-- NODE_ARGS]                in the batch script: a `trainmedic node` on each
                                                      allocated node, the job on all but the last S,
                                                      followed until it ends
  node [-- NODE_ARGS]                                 one node's step: `trainmedic node` named as Slurm
                                                      names the node
  drains                                              the service that drains in Slurm each node
                                                      trainmedic isolates, and resumes it on re-admission
  site-files DIR [-- NODE_ARGS]                       for a site running trainmedic node as a daemon:
                                                      its systemd unit, the Slurm prolog and epilog

The job spec is `trainmedic job submit`'s (its `nodes:` are the allocation's); its id becomes
ID-slurmJOBID. The batch script's exit status: 0 succeeded; 3 trainmedic gave up on the job (list 3
in slurm.conf's RequeueExitHold to hold it for a person); 1 it did not run to its end; 2 it could not
start as asked.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.ops.keys import add_operator_arguments, operator_key
from trainmedic.ops.prologue import operator_settings, run_command
from trainmedic.ops.slurm import site_files
from trainmedic.ops.slurm.allocation import EXIT_HELP
from trainmedic.ops.slurm.scheduler import DRAIN, QUERY, RESUME, Scheduler, template

TRAINMEDIC = [sys.executable, "-m", "trainmedic.cli"]
# What follows `--` is each node's `trainmedic node` options ({node} in them: the node's name), taken
# whole (trainmedic/cli.py): argparse would split them among the actions' own.
AFTER_DASHES = "node_args"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    batch = sub.add_parser("sbatch", help="write (--submit: and submit) the batch script of a job")
    batch.add_argument("spec", type=Path, metavar="SPEC.yaml", help="the job spec (`job submit`'s)")
    batch.add_argument("--nodes", type=int, required=True, metavar="N", help="the nodes the job starts on")
    batch.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                       help="an sbatch option for the script, e.g. --sbatch=--partition=gpu (repeatable)")
    batch.add_argument("--submit", action="store_true", help="submit the script with sbatch")
    _run_arguments(batch)
    run = sub.add_parser("run", help="in a batch script: run the job on the allocation until it ends",
                         epilog=EXIT_HELP)
    run.add_argument("spec", type=Path, metavar="SPEC.yaml", help="the job spec (`job submit`'s)")
    _run_arguments(run)
    run.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    add_operator_arguments(run)
    node = sub.add_parser("node", help="one node's step: `trainmedic node --node $SLURMD_NODENAME NODE_ARGS`")
    node.add_argument("--home", metavar="DIR", help="the node's TRAINMEDIC_HOME ({node}: its name)")
    files = sub.add_parser("site-files", help="write the systemd unit of `trainmedic node` and the Slurm "
                           "prolog and epilog that tell it which job owns the node")
    files.add_argument("folder", type=Path, metavar="DIR")
    files.add_argument("--owner-file", default=site_files.OWNER_FILE, metavar="PATH",
                       help=f"where the prolog writes the owning job (default {site_files.OWNER_FILE})")
    files.add_argument("--home", default=site_files.HOME, metavar="DIR",
                       help=f"the node's TRAINMEDIC_HOME: its credentials, keys and ledger (default "
                       f"{site_files.HOME})")
    drains = sub.add_parser("drains", help="drain in Slurm the nodes trainmedic isolates; resume them "
                            "when it re-admits them")
    drains.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    drains.add_argument("--poll-s", type=positive, default=2.0, metavar="S",
                        help="how often Slurm's nodes are read and set right (default 2)")
    drains.add_argument("--query-command", default=QUERY, metavar="CMD",
                        help=f"lists Slurm's nodes as NAME|STATE|REASON lines (default: {QUERY})")
    drains.add_argument("--drain-command", default=DRAIN, metavar="CMD",
                        help=f"drains {{node}} with {{reason}} (default: {DRAIN}); run as argv, no shell: "
                        "it needs Slurm's operator permission (root, SlurmUser or AdminLevel=Operator)")
    drains.add_argument("--resume-command", default=RESUME, metavar="CMD",
                        help=f"resumes {{node}} (default: {RESUME})")


def positive(text: str) -> float:
    value = float(text)
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text}: between 0 and 86400 seconds")
    return value


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spares", type=int, default=0, metavar="S",
                        help="nodes of the allocation held as spares (its last S; default 0)")
    parser.add_argument("--node-home", metavar="DIR", help="each node's TRAINMEDIC_HOME, where its "
                        "credentials and keys are ({node}: its name; default: as the batch script's)")
    parser.add_argument("--ready-timeout-s", type=float, default=300.0, metavar="S",
                        help="how long every node's trainmedic node gets to join (default 300)")
    parser.add_argument("--daemon-nodes", action="store_true",
                        help="the nodes run trainmedic node as a service of their own (`site-files`): start "
                        "none, wait for theirs; ranks then run outside Slurm's steps")
    parser.add_argument("--logs", type=Path, default=Path.cwd(), metavar="DIR",
                        help="where each node's trainmedic-node-JOBID-NODE.log goes (default: here)")


def run(args: argparse.Namespace) -> int:
    return run_command("slurm", _run, args)


def _run(args: argparse.Namespace) -> int:
    if args.action == "sbatch":
        return write_script(args)
    if args.action == "node":
        return exec_node(args)
    if args.action == "site-files":
        return write_site_files(args)
    if args.action == "run":
        from trainmedic.ops.slurm.runner import run_in_allocation

        key = operator_key(args, "trainmedic slurm run")
        return run_in_allocation(args, operator_settings(args), key)
    return serve_drains(args)


def write_script(args: argparse.Namespace) -> int:
    from trainmedic.ops.slurm.batch_script import script

    if args.nodes < 1 or args.spares < 0:
        raise ConfigError("--nodes must be at least 1 and --spares at least 0")
    run_args = [*(["--node-home", args.node_home] if args.node_home else []),
                *(["--daemon-nodes"] if args.daemon_nodes else []),
                "--ready-timeout-s", f"{args.ready_timeout_s:g}", "--logs", str(args.logs.resolve())]
    text = script(args.spec, args.nodes, args.spares, run_args, args.sbatch, args.node_args, TRAINMEDIC)
    if not args.submit:
        print(text, end="")
        return 0
    done = subprocess.run(["sbatch"], input=text, capture_output=True, text=True)
    print(done.stdout.strip() or done.stderr.strip())
    return done.returncode


def write_site_files(args: argparse.Namespace) -> int:
    if not args.owner_file.startswith("/"):
        raise ConfigError(f"--owner-file {args.owner_file!r}: give an absolute path (slurmd runs the prolog "
                          "in a directory of its own)")
    args.folder.mkdir(parents=True, exist_ok=True)
    service = site_files.unit(TRAINMEDIC, args.node_args, args.owner_file, args.home)
    written = {
        "trainmedic-node.service": (service, 0o644),
        "trainmedic-prolog.sh": (site_files.prolog(args.owner_file), 0o755),
        "trainmedic-epilog.sh": (site_files.epilog(args.owner_file), 0o755),
    }
    for name, (text, mode) in written.items():
        path = args.folder / name
        path.write_text(text)
        path.chmod(mode)
    folder = args.folder.resolve()
    print(f"wrote {', '.join(written)} in {folder}. Install them on every node:\n"
          f"  cp {folder}/trainmedic-node.service /etc/systemd/system/ && "
          "systemctl enable --now trainmedic-node\n"
          f"  slurm.conf: Prolog={folder}/trainmedic-prolog.sh Epilog={folder}/trainmedic-epilog.sh "
          "PrologFlags=Alloc\n"
          "then run jobs with `trainmedic slurm run --daemon-nodes` (docs/slurm.md)")
    return 0


def exec_node(args: argparse.Namespace) -> int:
    """Become `trainmedic node` for the node Slurm runs this step on."""
    name = os.environ.get("SLURMD_NODENAME", "")
    if not name:
        raise ConfigError("SLURMD_NODENAME is unset: `trainmedic slurm node` runs as a Slurm step (srun)")
    if any(word == "--node" or word.startswith("--node=") for word in args.node_args):
        raise ConfigError("the node's name is Slurm's (SLURMD_NODENAME): drop --node from the node options")
    env = dict(os.environ)
    if args.home:
        env["TRAINMEDIC_HOME"] = args.home.replace("{node}", name)
    node_args = [word.replace("{node}", name) for word in args.node_args]
    os.execve(sys.executable, [*TRAINMEDIC, "node", "--node", name, *node_args], env)
    return 1  # not reached


def serve_drains(args: argparse.Namespace) -> int:
    from trainmedic.bus.service_cli import run_until_stopped
    from trainmedic.ops.slurm.drain_service import serve

    scheduler = Scheduler(query=template(args.query_command, "--query-command", ()),
                          drain=template(args.drain_command, "--drain-command", ("node", "reason")),
                          resume=template(args.resume_command, "--resume-command", ("node",)))
    settings = operator_settings(args)
    return run_until_stopped("slurm drains", lambda stop: serve(settings, scheduler, args.poll_s, stop))
