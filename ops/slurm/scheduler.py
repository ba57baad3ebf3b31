"""Slurm's commands, run as argv (never through a shell): the nodes as `sinfo` shows them, a drain or a
resume by `scontrol` or by the site's own command (`{node}` and `{reason}` in its words are filled in)."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.ops.slurm.drains import Change, SlurmNode, parse_sinfo

QUERY = "sinfo --noheader --Node --format=%N|%T|%E"
DRAIN = "scontrol update NodeName={node} State=DRAIN Reason={reason}"
RESUME = "scontrol update NodeName={node} State=RESUME"
TIMEOUT_S = 30.0
MAX_OUTPUT = 200  # characters of a failed command's stderr that its error quotes


class SlurmError(TrainmedicError):
    """A Slurm command failed, or could not be run."""


def template(text: str, option: str, needs: tuple[str, ...]) -> tuple[str, ...]:
    """A command line's words; a ConfigError when it lacks a placeholder it must have."""
    try:
        words = tuple(shlex.split(text))
    except ValueError as err:
        raise ConfigError(f"{option} {text!r}: {err}") from None
    missing = [name for name in needs if not any(f"{{{name}}}" in word for word in words)]
    if not words or missing:
        wanted = ", ".join(f"{{{name}}}" for name in needs)
        raise ConfigError(f"{option} {text!r} must name the command and {wanted} in its words")
    return words


@dataclass(frozen=True)
class Scheduler:
    query: tuple[str, ...] = tuple(shlex.split(QUERY))
    drain: tuple[str, ...] = tuple(shlex.split(DRAIN))
    resume: tuple[str, ...] = tuple(shlex.split(RESUME))
    timeout_s: float = TIMEOUT_S

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_sinfo(self._run(self.query))

    def apply(self, change: Change) -> None:
        words = self.drain if change.verb == "drain" else self.resume
        self._run(tuple(w.replace("{node}", change.node).replace("{reason}", change.reason) for w in words))

    def _run(self, argv: tuple[str, ...]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                                  timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SlurmError(f"{shlex.join(argv)}: {err}") from None
        if done.returncode != 0:
            said = " ".join(done.stderr.split())[:MAX_OUTPUT]
            raise SlurmError(f"{shlex.join(argv)}: exit {done.returncode}: {said}")
        return done.stdout
