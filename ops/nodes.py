"""See the cluster's nodes, and take one out of service or put it back
(docs/coordinator.md#node-lifecycle).

  list              every node: its state, why, since when, and the jobs on it
  cordon NODE       no new work goes to NODE; what runs there keeps running
  drain NODE        the coordinator re-plans NODE's jobs off it now (one plan per job); no new work
  uncordon NODE     NODE is back in the pool: ends a cordon, a drain or an isolation
  enroll NODE       let a new node join once: prints its join token (ops/node_enroll.py)
  remove NODE       take NODE out for good: its principal deleted, its key untrusted, its jobs moved

States: ready, cordoned, draining (a job still runs there), drained, isolated (the coordinator took
it out for a fault and re-admits it after probation unless `readmission: off`), enrolled (its join
token not used yet), registered (joined by token, its executor not started since), removed, unknown
(a job names it, but no executor there ever reported and --config does not list it; a node only a
rejected job named is not listed). Each change is an
event on the nodes topic, signed with the operator key of --keys-dir (--insecure: unsigned). An
unknown node or a missing operator key is exit status 2.
"""

from __future__ import annotations

import argparse
import getpass
import time
from pathlib import Path

from pydantic import ValidationError

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.common.errors import ConfigError
from trainmedic.common.yaml_file import load_mapping
from trainmedic.ops import node_enroll
from trainmedic.ops.incidents.render import iso, span
from trainmedic.ops.jobs.states import JobLog
from trainmedic.ops.keys import add_operator_arguments, operator_key
from trainmedic.ops.prologue import operator_settings, run_command
from trainmedic.recovery.coordinator.core import CoordinatorConfig
from trainmedic.recovery.coordinator.core.lifecycle import status
from trainmedic.recovery.coordinator.core.membership import pending
from trainmedic.recovery.coordinator.core.readmission import outlook
from trainmedic.recovery.coordinator.intake import listing
from trainmedic.recovery.coordinator.kafka_adapter import read_topics, valid
from trainmedic.schemas.nodes import NodeCordoned, NodeDrained, NodeUncordoned
from trainmedic.schemas.printable import terminal_safe

CHANGES = {
    "cordon": ("node_cordoned", "cordoned"),
    "drain": ("node_drained", "draining"),
    "uncordon": ("node_uncordoned", "back in the pool"),
}


class UnknownNode(ValueError):
    """A node name neither the log nor the cluster configuration knows."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="every node: state, why, since when, its jobs")
    _common(listing)
    for name, what in (("cordon", "no new work goes to NODE; what runs there keeps running"),
                       ("drain", "move NODE's jobs off it now (one re-plan per job); no new work"),
                       ("uncordon", "put NODE back in the pool (ends a cordon, drain or isolation)")):
        change = sub.add_parser(name, help=what, description=what)
        change.add_argument("node", metavar="NODE")
        change.add_argument("--reason", default="", help="why, for `nodes list` and the log")
        change.add_argument("--by", default=None, help="who (default: the user name)")
        add_operator_arguments(change)
        _common(change)
    node_enroll.add_parsers(sub)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE.yaml",
                        help="the coordinator's config file: its `nodes:` are known even before the log "
                             "names them (a spare), and its re-admission settings say when an isolated "
                             "node comes back")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")


def run(args: argparse.Namespace) -> int:
    return run_command("nodes", _run, args, usage=(UnknownNode,))


def _run(args: argparse.Namespace) -> int:
    settings = operator_settings(args)
    if args.action in ("enroll", "remove"):
        return node_enroll.run(args, settings, args.by or _user())
    key = None if args.action == "list" else operator_key(args, "trainmedic nodes")
    state = fold_log(settings, load_config(args.config))
    if args.action == "list":
        print(render(state, time.time()))
        return 0
    return change(settings, state, args.action, args.node, args.reason, args.by or _user(), key)


def load_config(path: Path | None):
    """The coordinator's config from its YAML file; None without one (then every node the log names
    is known, and the coordinator's defaults apply)."""
    if path is None:
        return None
    try:
        return CoordinatorConfig.model_validate(load_mapping(path, "the coordinator's settings"))
    except ValidationError as err:
        raise ConfigError(f"{path}: {err.errors(include_url=False)[0]['msg']}") from None


def fold_log(settings, config):
    """The coordinator's state, folded from the log as it stands now (`taken`)."""
    topics = settings.topics
    with TopicReader(settings, read_topics(topics), end=NOW, validate=True, name=topics.owned("nodes"),
                     timeout_s=30.0) as reader:
        records = valid(item for batch in reader.batches(give_up_s=60.0) for item in batch)
    return taken(listing(records, config, topics.jobs), [record.event for record in records])


def taken(state, events: list):
    """`state` (folded from `events`) without the jobs the coordinator rejected, which a fold without
    its config takes: the nodes only they name are names, not nodes."""
    for job in JobLog.of(state, events).rejected:
        state.jobs.pop(job, None)
    return state


def never_heard(state, node) -> bool:
    """No executor on the node ever reported, and the cluster's config does not list it: a name in
    the log (a job's spec, an incident), not a node known to exist."""
    return node.id not in state.members and node.heard_from is None


def rows(state, now: float) -> list[tuple[str, ...]]:
    """NODE, STATE, SINCE, WHY, JOBS for each node, by name. A node never heard from is `unknown`
    while a job names it, and not shown otherwise: it is not in the pool as far as anyone knows."""
    out = []
    for node in sorted(state.nodes.values(), key=lambda n: n.id):
        shown = status(state, node.id)
        if shown == "ready" and never_heard(state, node):
            named = [job.spec.id for job in state.jobs.values() if node.id in (*job.spec.nodes, *job.nodes)]
            if named:
                why = "never heard from: no executor there reported and --config does not list it"
                out.append((node.id, "unknown", "-", why, " ".join(named)))
            continue
        if shown == "isolated":
            incident = state.incidents.get(node.isolated_by)
            what = f" ({incident.category}, {incident.status})" if incident else ""
            since, why = node.isolated_ts, f"incident {node.isolated_by}{what}; {outlook(state, node, now)}"
        elif shown in ("leaving", "left"):
            since, why = node.left_ts, f"announced by the node itself: {node.left_reason or 'shutting down'}"
        elif shown == "removed":
            since, why = node.removed_ts, node.removed_reason or "removed by an operator"
        elif shown == "registered":
            since, why = node.registered_ts, "registered its key; its executor has not joined since"
        else:
            since, why = node.mode_ts, node.mode_reason
            if shown == "ready" and node.returned_ts is not None and node.returned_ts > (node.mode_ts or 0):
                since, why = node.returned_ts, "re-admitted by the coordinator after its probation"
        when = "-" if since is None else f"{iso(since)[:19]} ({span(max(0.0, now - since))} ago)"
        job = state.job_on(node.id)
        out.append((node.id, shown, when, why or "-", job.spec.id if job else "-"))
    return sorted([*out, *_enrolled(state, now)])


def _enrolled(state, now: float) -> list[tuple[str, ...]]:
    """A row for each node enrolled that did not register (nor was removed since): not a member."""
    out = []
    for enrollment in pending(state):
        name, left = enrollment.node, enrollment.expires - now
        why = f"join token expires in {span(left)}" if left > 0 else "join token expired: enroll it again"
        since = f"{iso(enrollment.ts)[:19]} ({span(max(0.0, now - enrollment.ts))} ago)"
        out.append((name, "enrolled", since, why, "-"))
    return out


def render(state, now: float) -> str:
    if not state.nodes and not state.enrollments:
        return "no nodes known (none in the log; --config names the cluster's)"
    header = ("NODE", "STATE", "SINCE (UTC)", "WHY", "JOBS")
    table = [header, *(tuple(map(terminal_safe, row)) for row in rows(state, now))]  # WHY is incident text
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in table)


def change(settings, state, action: str, node: str, reason: str, by: str, key=None) -> int:
    """Publish the node's lifecycle event, signed with the operator's `key` (unsigned when None:
    insecure) for this deployment (its topic prefix), and say what the coordinator will do."""
    if node not in state.nodes:
        known = " ".join(sorted(state.nodes)) or "none"
        raise UnknownNode(f"unknown node {node!r}: neither the log nor the config names it (known: {known})")
    model = {"cordon": NodeCordoned, "drain": NodeDrained, "uncordon": NodeUncordoned}[action]
    event = model(ts=time.time(), node=node, reason=reason, by=by, deployment=settings.topics.prefix)
    if key is not None:
        event = key.sign(event)
    with EventProducer(settings, client_id=settings.topics.owned("nodes")) as producer:
        producer.send(settings.topics.nodes, event, key=node)
    print(f"node {node}: {CHANGES[action][1]}. {consequence(state, action, node)}")
    return 0


def consequence(state, action: str, node: str) -> str:
    """What the coordinator does next, from the state before the change."""
    job = state.job_on(node)
    on = f"job {job.spec.id}" if job else None
    if action == "cordon":
        return (f"{on} keeps running there; no new ranks go to it." if on
                else "No job runs there; no new ranks go to it.")
    if action == "drain":
        return (f"The coordinator re-plans {on} off it (one plan): the job moves to a free node, "
                f"or shrinks if its sizes allow, or waits queued." if on
                else "No job runs there; no new ranks go to it.")
    isolation = state.nodes[node].isolated_by
    ended = "" if isolation is None else f"It ends its isolation (incident {isolation}). "
    return f"{ended}The coordinator re-plans, and grows jobs onto it when the planner says the restart pays."


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
