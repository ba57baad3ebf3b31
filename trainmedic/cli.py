"""`trainmedic`: one command in front of every service and tool.

Each subcommand lives in its own module with `add_arguments(parser)` and `run(args) -> int`.
Those modules import their heavy dependencies (Kafka, Faust, torch) inside `run`, so that
`trainmedic --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from bus.entry import configure_logging

# name -> (module, one-line help). The order is the order of `trainmedic --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("trainmedic.broker_cli", "start, stop or inspect the local Apache Kafka broker"),
    "topics": ("trainmedic.topics_cli", "create or list the trainmedic topics"),
    "schemas": ("schemas.cli", "export the event contract as JSON Schema"),
    "demo": ("trainmedic.demo", "run the local demo"),
    "run": ("trainmedic.run", "run your training script under trainmedic on this machine (like torchrun)"),
    "detector": ("streams.cli", "run the detector: telemetry in, incidents out"),
    "replay": ("streams.replay", "run the detector over a telemetry recording (JSON lines)"),
    "record": ("streams.record", "record the telemetry topics to a JSON-lines file for replay"),
    "simulate": ("trainmedic.simulate.cli", "compare recovery policies on a simulated cluster over days"),
    "plan": ("recovery.planner.cli", "plan the cluster's next allocation from a JSON request"),
    "gpu": ("producers.gpu_cli", "publish GPU samples from NVML, dcgm-exporter or synthetic GPUs"),
    "agent": ("producers.agent_cli", "publish this host's heartbeat with the state of its links"),
    "node": ("trainmedic.node_cli", "run a node's host agent, GPU producer and executor in one process"),
    "executor": ("recovery.executor.cli", "run a node's executor: apply signed commands to its ranks"),
    "coordinator": ("recovery.coordinator.cli", "run the recovery coordinator (also: python -m recovery)"),
    "keys": ("recovery.keys_cli", "generate, rotate or list the keys that sign commands"),
    "job": ("recovery.coordinator.job_cli", "submit, stop or list jobs; one job's status or its ranks' logs"),
    "nodes": ("trainmedic.nodes_cli", "list nodes and their state; cordon, drain or uncordon one"),
    "incidents": ("ops.incident_log.cli", "list, show, follow or export incidents and what recovery did"),
    "alerts": ("ops.alerts.cli", "forward incidents to Alertmanager, PagerDuty and webhooks"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainmedic",
        description="Self-healing for large distributed training jobs, on Kafka.",
        epilog="Environment: TRAINMEDIC_KAFKA_BOOTSTRAP (broker address), TRAINMEDIC_TOPIC_PREFIX "
        "(default 'trainmedic.'), TRAINMEDIC_KAFKA_CONFIG (extra librdkafka settings as JSON), "
        "TRAINMEDIC_HOME (local state, default ./.trainmedic). See README.md.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
