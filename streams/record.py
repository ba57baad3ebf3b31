"""Record the telemetry topics to a JSON-lines file that `trainmedic replay` reads, disturbing no
consumer group (docs/streams.md, "Recording live telemetry: `trainmedic record`").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from trainmedic.common.timespan import duration_arg, instant_arg

if TYPE_CHECKING:
    from trainmedic.bus.reader import TopicReader
    from trainmedic.schemas import Topics


def parse_start_offset(text: str) -> str | int:
    """'earliest', 'latest' or an offset N >= 0 (applied to every partition)."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(f"{text!r} is not earliest, latest or an offset >= 0")


def start_offset_arg(text: str) -> str | int:
    """An argparse type: `parse_start_offset`."""
    try:
        return parse_start_offset(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    start = parser.add_argument_group("start (one is required)").add_mutually_exclusive_group(required=True)
    start.add_argument("--from-time", type=instant_arg(time.time), metavar="TIME",
                       help="first message the broker took at or after TIME: ISO 8601 (no offset = UTC, "
                            "e.g. 2025-05-01T12:00:00Z) or a span ago (30s, 10m, 2h, 1d)")
    start.add_argument("--from-offset", type=start_offset_arg, metavar="OFFSET",
                       help="earliest, latest, or an offset N in every partition")
    end = parser.add_argument_group("end (default: the end of every partition when the command "
                                    "starts)").add_mutually_exclusive_group()
    end.add_argument("--until", type=instant_arg(time.time), metavar="TIME",
                     help="stop before the first message the broker took at or after TIME (ISO 8601, "
                          "or a span ago); a future TIME records live until then")
    end.add_argument("--duration", type=duration_arg, metavar="SPAN",
                     help="record SPAN (30s, 10m, 2h) of messages from --from-time, or from now "
                          "with --from-offset")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write the events here instead of standard output")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    parser.add_argument("--timeout-s", type=float, default=10.0, metavar="S",
                        help="how long to wait for the broker to answer (default 10)")
    parser.add_argument("--progress-s", type=float, default=5.0, metavar="S",
                        help="report progress on stderr every S seconds (default 5)")


@dataclass
class Counts:
    """What a recording wrote, per topic, and what it skipped."""

    written: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    @property
    def total(self) -> int:
        return sum(self.written.values())

    def summary(self) -> str:
        per_topic = ", ".join(f"{topic} {count:,}" for topic, count in self.written.items())
        return f"wrote {self.total:,} events ({per_topic}); skipped {self.skipped:,} invalid"


def run(args: argparse.Namespace) -> int:
    from trainmedic.bus.reader import NOW, At, TopicReader
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.common.errors import TrainmedicError

    if args.duration == 0:
        print("trainmedic record: --duration must be longer than 0s", file=sys.stderr)
        return 2
    started = time.time()
    start_ts = args.from_time
    end_ts = args.until
    if args.duration is not None:
        end_ts = (start_ts if start_ts is not None else started) + args.duration
    if start_ts is not None and start_ts > started:
        print("trainmedic record: --from-time is in the future", file=sys.stderr)
        return 2
    if end_ts is not None and start_ts is not None and end_ts <= start_ts:
        print("trainmedic record: the end must come after the start", file=sys.stderr)
        return 2
    try:
        settings = KafkaSettings.from_env(role="operator", bootstrap=args.bootstrap)
    except TrainmedicError as err:
        print(f"trainmedic record: {err}", file=sys.stderr)
        return 2
    topics = settings.topics
    names = [topics.gpu, topics.node, topics.worker]
    reader = TopicReader(settings, names, start=args.from_offset if start_ts is None else At(start_ts),
                         end=NOW if end_ts is None else At(end_ts), name=settings.topics.owned("record"),
                         timeout_s=args.timeout_s)
    counts = Counts(written=dict.fromkeys(names, 0))
    try:
        reader.open()
        out = args.output.open("wb") if args.output else sys.stdout.buffer
        try:
            copy(reader, topics, counts, out, sys.stderr, args.progress_s)
        finally:
            if args.output:
                out.close()
    except (TrainmedicError, OSError) as err:  # Kafka, or the output file
        print(f"trainmedic record: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"trainmedic record: interrupted; {counts.summary()}", file=sys.stderr)
        return 130
    finally:
        reader.close()
    print(f"trainmedic record: {counts.summary()}", file=sys.stderr)
    return 0


def copy(reader: TopicReader, topics: Topics, counts: Counts, out: BinaryIO, errors: TextIO,
         progress_s: float) -> None:
    """Write each valid value the reader gives to `out`, unchanged, until it is done; report invalid
    ones and progress on `errors`."""
    from trainmedic.bus.message import parse_message
    from trainmedic.schemas import DeadLettered

    next_report = time.monotonic() + progress_s
    for batch in reader.batches():
        for msg in batch:
            parsed = parse_message(topics, msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                                   time.time())
            if isinstance(parsed, DeadLettered):
                counts.skipped += 1
                print(f"skipped {msg.topic}[{msg.partition}]@{msg.offset}: {parsed.reason}", file=errors)
                continue
            counts.written[msg.topic] += 1
            value = msg.value
            out.write(value if b"\n" not in value and b"\r" not in value else
                      json.dumps(json.loads(value), separators=(",", ":")).encode())
            out.write(b"\n")
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + progress_s
            print(f"trainmedic record: {counts.total:,} events so far, {counts.skipped:,} skipped; "
                  f"{reader.progress()}", file=errors)
    out.flush()
