"""Plan the cluster's next allocation from a JSON request and print the plan as JSON
({"allocations", "sizes", "waf", "objective", "restore"}; docs/planner.md). Bad input gives one
line on stderr that says what is wrong and where, and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

INPUT_FORMAT = """\
input (JSON; unknown fields are errors):
  {"nodes": [{"id": "n01", "healthy": true, "switch": "leaf-1", "gpus": 8}, ...],
   "jobs": [{"id": "llm-a", "weight": 1.0,
             "throughput": {"4": 1.1e15, "8": 2.1e15},
             "current": ["n01", "n02", "n03", "n04"], "transition_s": 120}, ...],
   "horizon_s": 10800, "transition_s": 60}

  throughput  node count -> FLOP/s; a job runs at one of these sizes or not at all
  current     the nodes the job runs on now ([] for a queued job)
  defaults    healthy true, switch null (on the spine), gpus 8, weight 1, current [],
              a job's transition_s = the top-level transition_s (default 60)
  horizon_s   expected running time until the next failure
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = INPUT_FORMAT
    parser.add_argument("input", metavar="INPUT.json", help="the plan request; - reads stdin")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from trainmedic.recovery.planner.plan import plan
    from trainmedic.schemas.plan import PlanRequest

    name = "stdin" if args.input == "-" else args.input
    try:
        text = sys.stdin.buffer.read() if args.input == "-" else Path(args.input).read_bytes()
        request = PlanRequest.model_validate_json(text)
    except OSError as error:
        return fail(f"cannot read {name}: {error.strerror or error}")
    except ValidationError as error:
        return fail(f"{name}: {describe(error)}")
    print(plan(request).model_dump_json(indent=2, exclude_none=True))
    return 0


def fail(message: str) -> int:
    print(f"trainmedic plan: {' '.join(message.split())}", file=sys.stderr)
    return 2


def describe(error: ValidationError) -> str:
    """The first validation error as `where: what`, counting the others."""
    errors = error.errors()
    first = errors[0]
    where = location(first["loc"])
    what = first["msg"].removeprefix("Value error, ")
    if where and isinstance(first["input"], str | int | float | bool):
        what += f" (got {first['input']!r:.40})"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {what}{more}" if where else f"{what}{more}"


def location(loc: tuple) -> str:
    """A pydantic error location as a path into the document, e.g. jobs[0].throughput['4x']."""
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
        elif item == "[key]":
            path += " (as a key)"
        elif item.isidentifier():
            path += f".{item}" if path else item
        else:
            path += f"[{item!r}]"
    return path
