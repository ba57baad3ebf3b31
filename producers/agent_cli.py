"""Publish this host's node_heartbeat once per interval, with the state of its data-plane links read
from sysfs; a link can be made to flap for demos (--inject, --control; docs/producers.md, "Host agent").
  --inject flap=eth0,at=20s,for=3s     eth0 reports down from 20 s after start, for 3 s
"""

from __future__ import annotations

from trainmedic.bus.config import Section
from trainmedic.producers.command import ProducerCommand
from trainmedic.producers.config import HostAgentConfig


def _parts():
    from trainmedic.producers.agent import open_agent, run_agent

    return open_agent, run_agent


AGENT = ProducerCommand("agent", Section(HostAgentConfig, env="AGENT"), _parts)
add_arguments, run = AGENT.add_arguments, AGENT.run
