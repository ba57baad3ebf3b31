"""`trainmedic slurm drains`: the coordinator's log followed, and Slurm told of each node it isolates and
re-admits (`drains.changes`), every --poll-s; a failed command is said once and tried again the next
round."""

from __future__ import annotations

import logging
import threading

from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.jobs.view import JobWatch
from trainmedic.ops.slurm.drains import Change, changes
from trainmedic.ops.slurm.scheduler import Scheduler, SlurmError

log = logging.getLogger("trainmedic.slurm.drains")
MAX_REMEMBERED = 10_000  # failures said once each; the oldest forgotten past this


def serve(settings: KafkaSettings, scheduler: Scheduler, poll_s: float, stop: threading.Event) -> None:
    said: dict[tuple[Change | None, str], None] = {}

    def once(change: Change | None, err: Exception) -> None:
        if (change, str(err)) not in said:
            log.warning("%s", err)
            said[(change, str(err))] = None
            while len(said) > MAX_REMEMBERED:
                said.pop(next(iter(said)))

    with JobWatch(settings) as watch:
        watch.backlog()
        log.info("following %s; Slurm's nodes every %g s", settings.topics.recovery, poll_s)
        while not stop.is_set():
            try:
                reconcile(watch, scheduler, once)
            except (SlurmError, ValueError) as err:  # whatever Slurm printed: said, tried again next round
                once(None, err)
            watch.poll(poll_s)


def reconcile(watch: JobWatch, scheduler: Scheduler, once) -> None:
    """One round: Slurm's nodes read, each change the coordinator's state asks for applied."""
    for change in changes(watch.state, scheduler.nodes()):
        try:
            scheduler.apply(change)
        except SlurmError as err:
            once(change, err)
            continue
        log.info("%s %s%s", "drained" if change.verb == "drain" else "resumed", change.node,
                 f": {change.reason}" if change.reason else " (re-admitted by trainmedic)")
