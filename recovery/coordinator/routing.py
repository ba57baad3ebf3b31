"""Where each event the coordinator writes lives on the bus, its topic and its key: commands to
`commands`, everything else it decides to `recovery`, which only it writes (docs/coordinator.md).
"""

from __future__ import annotations

from trainmedic.schemas.commands import Command
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.nodes import NodeReadmitted
from trainmedic.schemas.recovery import RecoverySkipped


def route(event: object) -> tuple[str, str]:
    """(topic suffix, key) of an event the coordinator writes. Keys are what the fold relies on for
    order: a job's lifecycle events share the job's key (one partition, in order), commands the node's."""
    match event:
        case Command():
            return "commands", event.node
        case NodeReadmitted():
            return "recovery", event.node
        case Incident() | RecoverySkipped():
            return "recovery", event.job or event.node or getattr(event, "incident_id", None) or ""
    return "recovery", event.job
