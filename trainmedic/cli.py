"""`trainmedic`: one command in front of every service and tool. Each subcommand is a module with
`add_arguments(parser)` and `run(args) -> int`, imported only when given, so `trainmedic --help` stays
instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from trainmedic.common.entry import configure_logging

# name -> (module, relative to this package; one-line help). The order is the order of `trainmedic --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": (".local.broker_cli", "start, stop or inspect the local Apache Kafka broker"),
    "topics": (".ops.topics", "create or list the trainmedic topics"),
    "schemas": (".schemas.cli", "export the event contract as JSON Schema"),
    "demo": (".demo", "run the local demo"),
    "run": (".run", "run your training script under trainmedic on this machine (like torchrun)"),
    "detector": (".streams.cli", "run the detector: telemetry in, incidents out"),
    "replay": (".streams.replay", "run the detector over a telemetry recording (JSON lines)"),
    "record": (".streams.record", "record the telemetry topics to a JSON-lines file for replay"),
    "simulate": (".simulate.cli", "compare recovery policies on a simulated cluster over days"),
    "plan": (".recovery.planner.cli", "plan the cluster's next allocation from a JSON request"),
    "gpu": (".producers.gpu_cli", "publish GPU samples from NVML, dcgm-exporter or synthetic GPUs"),
    "agent": (".producers.agent_cli", "publish this host's heartbeat with the state of its links"),
    "node": (".node", "run a node's host agent, GPU producer and executor in one process"),
    "executor": (".recovery.executor.cli", "run a node's executor: apply signed commands to its ranks"),
    "coordinator": (".recovery.coordinator.cli", "run the recovery coordinator"),
    "join": (".host_join", "join this host to the control plane with a token of `trainmedic broker invite`"),
    "keys": (".ops.keys", "generate, rotate, trust, revoke, list or sync the keys that sign"),
    "job": (".ops.jobs.cli", "submit, stop or list jobs; one job's status or its ranks' logs"),
    "nodes": (".ops.nodes", "list nodes and their state; cordon, drain or uncordon one"),
    "incidents": (".ops.incidents.cli", "list, show, follow or export incidents and their recovery"),
    "alerts": (".ops.alerts.cli", "forward incidents to Alertmanager, PagerDuty and webhooks"),
    "slurm": (".ops.slurm.cli", "run a job in a Slurm allocation; drain in Slurm the nodes it isolates"),
}


def chosen(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (`trainmedic` takes no values)."""
    word = next((token for token in argv if not token.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(command_name: str | None = None) -> argparse.ArgumentParser:
    """Every command listed; the arguments, description and entry of `command_name` only."""
    parser = argparse.ArgumentParser(
        prog="trainmedic",
        description="Self-healing for large distributed training jobs, on Kafka.",
        epilog="Environment: TRAINMEDIC_KAFKA_BOOTSTRAP (broker address), TRAINMEDIC_TOPIC_PREFIX "
        "(default 'trainmedic.'), TRAINMEDIC_KAFKA_CONFIG (extra librdkafka settings as JSON), "
        "TRAINMEDIC_HOME (your local state, default ~/.local/state/trainmedic). See README.md.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if name != command_name:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name, __package__)
        command = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = chosen(argv)
    parser = build_parser(name)
    passed = name and getattr(importlib.import_module(COMMANDS[name][0], __package__), "AFTER_DASHES", None)
    rest: list[str] = []
    if passed and "--" in argv:  # the command takes what follows `--` whole, as one list
        argv, rest = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    args = parser.parse_args(argv)
    if passed:
        setattr(args, passed, rest)
    configure_logging(args.verbose)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
