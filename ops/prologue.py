"""What the operator commands (`job`, `nodes`, `incidents`, `keys`, `topics`) share: their errors as one
line and an exit status, and their Kafka settings, taken from the `trainmedic run` record when nothing
names a deployment (docs/run.md, docs/security.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping

from trainmedic.bus.settings import KafkaSettings, home
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.ops.run_records import find_run

USAGE = 2  # the command cannot run as asked: nothing was done
FAILED = 1  # it ran and failed: a broker that did not answer, a job the log does not hold
INTERRUPTED = 130  # Ctrl-C, as a shell reports it


def say(name: str, message: object) -> None:
    """`trainmedic NAME: message` on stderr, on one line."""
    print(f"trainmedic {name}: {' '.join(str(message).split())}", file=sys.stderr)


def run_command(name: str, body: Callable[[argparse.Namespace], int], args: argparse.Namespace, *,
                usage: tuple[type[BaseException], ...] = (), interrupted: int = INTERRUPTED) -> int:
    """`body(args)`'s exit status. A ConfigError, or one of `usage`, is a line on stderr and exit 2;
    any other TrainmedicError a line and exit 1; Ctrl-C exits `interrupted` (0 where it is how the
    command ends, as `--follow` does); a closed stdout (`| head`) exits 0."""
    try:
        return body(args)
    except (ConfigError, *usage) as err:
        say(name, err)
        return USAGE
    except TrainmedicError as err:
        say(name, err)
        return FAILED
    except KeyboardInterrupt:
        return interrupted
    except BrokenPipeError:  # what reads the output has all it wants
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (captured): nothing will flush to the pipe
        pass


def operator_settings(args: argparse.Namespace, role: str = "operator", job: str | None = None, *,
                      from_run: bool = True, env: Mapping[str, str] = os.environ,
                      **overrides: object) -> KafkaSettings:
    """Kafka settings for an operator command: its --bootstrap and --prefix (where it has them),
    `overrides`, then the environment. When none of these names the topic prefix or the broker, the
    deployment is that of the `trainmedic run` of `job` (no job: the newest run), said on stderr;
    a run on another broker than TRAINMEDIC_KAFKA_BOOTSTRAP's is not used."""
    values = {"bootstrap": getattr(args, "bootstrap", None), "topic_prefix": getattr(args, "prefix", None),
              **overrides}
    named = values["bootstrap"] is not None or values["topic_prefix"] is not None
    if from_run and not named and "TRAINMEDIC_TOPIC_PREFIX" not in env:
        record = find_run(home(env), job)
        if record is not None and env.get("TRAINMEDIC_KAFKA_BOOTSTRAP", record.bootstrap) == record.bootstrap:
            values.update(bootstrap=record.bootstrap, topic_prefix=record.prefix)
            print(f"(run {record.job}: topics {record.prefix}* on {record.bootstrap})", file=sys.stderr)
    return KafkaSettings.from_env(env, role=role, **values)
