"""Where each event lives on the bus: its topic and its key.

Keys are what the fold relies on for order: a job's lifecycle events share the job's key
(one partition, in order), commands and acks the node's.
"""

from __future__ import annotations

from schemas.commands import Command, CommandAcked
from schemas.incident import Incident
from schemas.jobs import JobSubmitted
from schemas.nodes import NodeCordoned, NodeDrained, NodeReadmitted, NodeUncordoned
from schemas.recovery import RecoverySkipped


def route(event: object) -> tuple[str, str]:
    """(topic suffix, key) of an event the coordinator reads or writes."""
    match event:
        case JobSubmitted():
            return "jobs", event.job.id
        case Command():
            return "commands", event.node
        case CommandAcked():
            return "acks", event.node
        case NodeCordoned() | NodeDrained() | NodeUncordoned() | NodeReadmitted():
            return "nodes", event.node
        case Incident() | RecoverySkipped():
            return "incidents", event.job or event.node or getattr(event, "incident_id", None) or ""
    return "incidents", event.job
