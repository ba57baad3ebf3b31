"""Read the incident log back: a table of incidents, one incident's details or its timeline, or
the raw events as JSON lines (docs/coordinator.md, docs/detection.md).

The detector's incidents and the coordinator's answers to them (`recovery`) are read from the
beginning, or from --since, and folded into one story per incident: the same story whatever order
the partitions are read in. --follow keeps reading and prints what changes (Ctrl-C ends it).

  trainmedic incidents list --since 2h
  trainmedic incidents timeline node_lost-3f2a            (an unambiguous id prefix is enough)
  trainmedic incidents export --since 2024-05-01T12:00Z > incidents.jsonl
  trainmedic incidents export --telemetry --since 30m > telemetry.jsonl && trainmedic replay telemetry.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time

from trainmedic.bus.reader import EARLIEST, NOW, At, TopicReader
from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import parse_instant
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.render import LEGEND, details, row, story, table
from trainmedic.ops.incidents.views import find, timeline, views
from trainmedic.ops.prologue import operator_settings, run_command, say
from trainmedic.schemas import DeadLettered
from trainmedic.schemas.printable import terminal_safe

DEFAULT_TIMEOUT_S = 10.0
RESUME_WINDOW_S = 300.0  # a rank restores and steps again well within this of its plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    common.add_argument("--since", metavar="TIME",
                        help="read from this time on: ISO (2024-05-01T12:00:00Z; no zone means UTC) or "
                        "a span back from now (30s, 10m, 2h, 1d); default: the beginning of the topic")
    common.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help="how long to wait for the broker before giving up (default %(default)s)")
    follow = argparse.ArgumentParser(add_help=False)
    follow.add_argument("--follow", action="store_true",
                        help="keep reading and print what changes (Ctrl-C ends)")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub.add_parser("list", parents=[common, follow], help="one row per incident")
    listing.add_argument("--status", choices=("open", "resolved"), help="only incidents in this status")
    show = sub.add_parser("show", parents=[common], help="every field of one incident, with its evidence")
    show.add_argument("id", metavar="ID", help="incident id, or an unambiguous prefix of one")
    story = sub.add_parser("timeline", parents=[common, follow],
                           help="one incident's story, times relative to its earliest evidence")
    story.add_argument("id", metavar="ID", help="incident id, or an unambiguous prefix of one")
    export = sub.add_parser("export", parents=[common, follow],
                            help="the raw events of both topics as JSON lines, one per message, in log "
                            "order per partition")
    export.add_argument("--telemetry", action="store_true",
                        help="export the telemetry topics instead (input for `trainmedic replay`)")


def run(args: argparse.Namespace) -> int:
    return run_command("incidents", _run, args, interrupted=0)  # Ctrl-C is how --follow ends


def _run(args: argparse.Namespace) -> int:
    settings = operator_settings(args)
    try:
        start_ts = parse_instant(args.since, time.time()) if args.since else None
    except ValueError as err:
        raise ConfigError(f"--since: {err}") from None
    topics = settings.topics
    telemetry = args.action == "export" and args.telemetry
    names = [topics.gpu, topics.node, topics.worker] if telemetry else [topics.incidents, topics.recovery]
    export = args.action == "export"
    reader = TopicReader(settings, names, start=EARLIEST if start_ts is None else At(start_ts),
                         validate=not export, name=topics.owned("incidents"), timeout_s=args.timeout_s)
    try:
        if export:
            return _export(reader, args.follow)
        return _show(reader, args, settings)
    finally:
        reader.close()


def _export(reader, follow: bool) -> int:
    """Each message value as one line, exactly as stored (values that are not one-line JSON skipped)."""
    skipped = 0
    for msg in _messages(reader, follow):
        text = (msg.value or b"").decode("utf-8", "replace").strip()
        if not text.startswith("{") or "\n" in text:
            skipped += 1
            print(f"skipped {msg.topic}[{msg.partition}]@{msg.offset}: not a one-line JSON object",
                  file=sys.stderr)
            continue
        print(text, flush=follow)
    if skipped:
        print(f"{skipped} messages skipped", file=sys.stderr)
    return 0


def _messages(reader, follow: bool):
    """The backlog, then (following) what arrives."""
    for batch in reader.batches():
        yield from batch
    while follow:
        yield from reader.poll()


def _worker_reports(settings, view, timeout_s: float) -> list:
    """The worker telemetry around the incident's plans: the steps that tell when the job resumed,
    and where a rank that restored reports a fallback from its replica. From the first plan to
    RESUME_WINDOW_S after the last."""
    first, last = view.plans[0].ts, view.plans[-1].ts + RESUME_WINDOW_S
    end = NOW if last >= time.time() else At(last)
    items: list = []
    with TopicReader(settings, [settings.topics.worker], start=At(first - 1.0), end=end, validate=True,
                     name=settings.topics.owned("incidents"), timeout_s=timeout_s) as reader:
        for batch in reader.batches():
            items += [item for item in batch if not isinstance(item, DeadLettered)]  # not this log's
    return items


def _show(reader, args: argparse.Namespace, settings) -> int:
    log = IncidentHistory()

    def fold_in(items) -> None:
        for item in items:
            if isinstance(item, DeadLettered):
                print(terminal_safe(f"invalid event {item.source_topic}[{item.partition}]@{item.offset} "
                                    f"skipped: {item.reason}"), file=sys.stderr)
            else:
                apply(log, item.event, None if item.timestamp_ms is None else item.timestamp_ms / 1000)

    for batch in reader.batches():
        fold_in(batch)
    if args.action == "list":
        def rows() -> list[tuple[str, ...]]:
            return [row(v) for v in views(log) if args.status in (None, v.status)]

        shown = rows()
        since = f" since {args.since}" if args.since else ""
        print(f"{table(shown)}\n{LEGEND}" if shown else f"no incidents in the log{since}", flush=True)
        while args.follow:
            fold_in(reader.poll())
            for changed in (r for r in rows() if r not in shown):
                shown.append(changed)
                print(table(shown).rsplit("\n", 1)[-1], flush=True)  # padded like the rows above
        return 0
    matches = find(log, args.id)
    if len(matches) != 1:
        where = f" since {args.since}" if args.since else ""
        why = (f"no incident {args.id!r} in the log{where}" if not matches else
               f"{args.id!r} names {len(matches)} incidents: {', '.join(v.id for v in matches[:10])}")
        say("incidents", terminal_safe(why))
        return 1
    view = matches[0]
    if view.plans:
        fold_in(_worker_reports(settings, view, args.timeout_s))
        view = next(v for v in find(log, view.id) if v.id == view.id)
    if args.action == "show":
        print(details(view))
        return 0
    printed = timeline(view)
    print(story(view, printed))
    while args.follow:
        fold_in(reader.poll())
        view = next(v for v in find(log, view.id) if v.id == view.id)
        entries = timeline(view)
        for entry in entries:
            if entry not in printed:
                print(story(view, [entry]).split("\n", 1)[1], flush=True)
        printed = entries
    return 0
