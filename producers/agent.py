"""The host agent: a node_heartbeat every interval with the state of the data-plane links, scripted link
flaps for demos, and a last heartbeat marked `leaving` on a planned shutdown (docs/producers.md, "Host
agent").
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from trainmedic.bus.outbox import Outbox
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.producers.config import HostAgentConfig
from trainmedic.producers.control import ControlFile
from trainmedic.producers.faults import HardwareFault, LinkFlap
from trainmedic.producers.links import discover_links, missing_links, read_links
from trainmedic.producers.rounds import apply_control, open_outbox, serve
from trainmedic.schemas import LinkState, NodeHeartbeat

log = logging.getLogger(__name__)


class HostAgent:
    """Builds this node's heartbeats. Thread-safe: `inject` may be called while it beats."""

    def __init__(
        self, node: str, links: tuple[str, ...], *, sysfs: Path, interval_s: float, start: float,
        flaps: tuple[LinkFlap, ...] = (),
    ) -> None:
        self.node = node
        self.links = links
        self.sysfs = sysfs
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._flaps: list[tuple[float, LinkFlap]] = []  # (when learned, flap)
        self.leaving = False  # set by `leave`: every heartbeat from then on says the node leaves
        for flap in flaps:
            self.inject(flap, now=start)

    def inject(self, flap: LinkFlap, now: float) -> None:
        """Flap `flap.link` from `now + flap.at_s` for `flap.for_s`; ConfigError for a link not reported."""
        if flap.link not in self.links:
            raise ConfigError(f"no link {flap.link!r} to flap; this agent reports: {', '.join(self.links)}")
        if flap.node not in (None, self.node):
            raise ConfigError(f"flap for node {flap.node!r} sent to the agent of {self.node!r}")
        with self._lock:
            self._flaps.append((now, flap))

    def leave(self) -> None:
        """The node is shutting down on purpose: its heartbeats say so from now on."""
        self.leaving = True

    def heartbeat(self, now: float) -> NodeHeartbeat:
        """The heartbeat at `now`: every link as sysfs shows it, unless a flap holds it down."""
        with self._lock:
            self._flaps = [(t, f) for t, f in self._flaps if now < t + f.at_s + f.for_s]
            down = {f.link for t, f in self._flaps if f.down(now - t)}
        links = [
            LinkState(name=link.name, up=False) if link.name in down else link
            for link in read_links(self.sysfs, self.links)
        ]
        return NodeHeartbeat(ts=now, node=self.node, interval=self.interval_s, links=tuple(links),
                             leaving=self.leaving)


def open_agent(config: HostAgentConfig, now: float) -> HostAgent:
    """The agent of `config`, its links found in sysfs when none are named."""
    links = config.links or discover_links(config.sysfs)
    if not links:
        log.warning("no data-plane links found under %s: heartbeats carry none", config.sysfs)
    missing = missing_links(config.sysfs, config.links)
    if missing:
        log.warning("links %s are not in %s: they are reported down", ", ".join(missing), config.sysfs)
    return HostAgent(config.node, links, sysfs=config.sysfs, interval_s=config.interval_s, start=now,
                     flaps=config.inject)


def run_agent(
    config: HostAgentConfig, settings: KafkaSettings, agent: HostAgent, stop: threading.Event,
    heard: threading.Event | None = None,
) -> Outbox:
    """Beat into Kafka until `stop` is set, then flush. Returns the outbox (its counts). An agent told
    to `leave` sends one last heartbeat that says so before the flush. `heard` is set once Kafka took a
    heartbeat (`trainmedic node`'s executor joins only then)."""
    outbox = open_outbox(settings, config.delivery, client_id=settings.topics.owned(f"agent-{config.node}"),
                         what="heartbeats")
    control = ControlFile.at_end(config.control) if config.control else None

    def inject(fault: HardwareFault, now: float) -> None:
        if not isinstance(fault, LinkFlap):
            raise ConfigError("the host agent injects link flaps only (flap=LINK,at=...,for=...)")
        agent.inject(fault, now)

    def beat(now: float) -> None:
        apply_control(control, inject, now)
        outbox.send(settings.topics.node, agent.heartbeat(now), key=agent.node)
        outbox.poll()
        if heard is not None and outbox.delivered:
            heard.set()

    def farewell(now: float) -> None:
        if agent.leaving:
            outbox.send(settings.topics.node, agent.heartbeat(now), key=agent.node)
            log.info("last heartbeat of %s sent: it leaves (its silence from now on is planned)", agent.node)

    log.info("heartbeat of %s every %.3gs with links %s into %s", agent.node, config.interval_s,
             ", ".join(agent.links) or "(none)", settings.topics.node)
    serve(beat, config.interval_s, outbox, config.delivery, stop, last=farewell)
    return outbox
