"""What the GPU producer and the host agent share: a round every interval into a non-blocking
outbox, runtime faults from a control file, and a flush with a deadline when told to stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from trainmedic.bus.outbox import Outbox
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.producers.config import Delivery
from trainmedic.producers.control import ControlFile
from trainmedic.producers.faults import FaultSpecError, HardwareFault, parse_fault
from trainmedic.producers.loop import run_every

log = logging.getLogger(__name__)


def open_outbox(settings: KafkaSettings, delivery: Delivery, *, client_id: str, what: str) -> Outbox:
    """An outbox over an idempotent producer whose local queue holds at most `delivery.max_buffered`."""
    producer = EventProducer(settings, client_id=client_id, max_buffered=delivery.max_buffered)
    return Outbox(producer, what=what)


def apply_control(control: ControlFile | None, inject: Callable[[HardwareFault, float], None],
                  now: float) -> None:
    """Parse and inject the fault lines appended to the control file; a bad line is logged and skipped."""
    if control is None:
        return
    for line in control.new_lines():
        try:
            inject(parse_fault(line), now)
        except (FaultSpecError, ConfigError) as err:
            log.error("control file %s: %s (line skipped)", control.path, err)
            continue
        log.info("control file %s: injected %s", control.path, line)


def serve(
    round_: Callable[[float], None], interval_s: float, outbox: Outbox, delivery: Delivery,
    stop: threading.Event, last: Callable[[float], None] | None = None,
    between: Callable[[float], None] | None = None,
) -> None:
    """Run `round_(now)` every `interval_s` until `stop`, and `between(now)` (if given) every
    `loop.BETWEEN_S` in between; then `last(now)` if given (a farewell: the host agent's heartbeat that
    says the node leaves), then flush the outbox within its deadline."""
    try:
        run_every(interval_s, round_, stop, between=between)
        if last is not None:
            last(time.time())
    finally:
        outbox.flush(delivery.flush_timeout_s)
