"""Run the detection core over a recording of telemetry, offline: events ordered by `ts` (stably), one
incident a JSON line out, invalid lines reported on stderr and skipped (docs/detection.md, "Replay").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from trainmedic.schemas.codec import InvalidEvent, decode_telemetry, encode
from trainmedic.schemas.incident import Incident


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, metavar="INPUT.jsonl",
                        help="telemetry events, one JSON object per line ('-' for stdin)")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write incidents here instead of standard output")
    parser.add_argument("--tail-s", type=float, default=0.0, metavar="S",
                        help="treat S seconds after the last event as silence, so lost nodes "
                             "and hangs at the very end are reported (default 0: the end of a "
                             "recording is not silence)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="detector configuration as JSON, nested by section "
                             "(e.g. {\"hang\": {\"floor_s\": 30}})")


def read_events(lines: Iterable[str], errors: TextIO, source: str = "input") -> list:
    """Valid telemetry events of the lines, in input order; bad lines reported to `errors`."""
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(decode_telemetry(line))
        except InvalidEvent as err:
            print(f"{source}:{number}: skipped: {err}", file=errors)
    return events


def replay(events: Iterable, config=None, tail_s: float = 0.0) -> list[Incident]:
    """The incidents the core decides for these events, ordered by ts (stably).

    Deadlines fire as event time passes; at the end the clock moves `tail_s` past the last
    event (0 by default), then failure evidence still held for correlation is decided."""
    from trainmedic.streams.core import Detector

    if tail_s < 0:
        raise ValueError("tail_s must be >= 0")
    ordered = sorted(events, key=lambda event: event.ts)
    detector = Detector(config)
    incidents: list[Incident] = []
    for event in ordered:
        incidents.extend(detector.observe(event))
    if ordered and tail_s:
        incidents.extend(detector.advance(ordered[-1].ts + tail_s))
    incidents.extend(detector.drain())
    return incidents


def _lines(path: Path) -> Iterator[str]:
    if str(path) == "-":
        yield from sys.stdin
        return
    with path.open(encoding="utf-8", errors="replace") as handle:
        yield from handle


def run(args: argparse.Namespace) -> int:
    from trainmedic.streams.core import DetectorConfig

    config = None
    if args.config is not None:
        config = DetectorConfig.from_dict(json.loads(args.config.read_text()))
    events = read_events(_lines(args.input), sys.stderr, str(args.input))
    incidents = replay(events, config, args.tail_s)
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        for incident in incidents:
            out.write(encode(incident).decode("utf-8") + "\n")
    finally:
        if args.output:
            out.close()
    return 0
