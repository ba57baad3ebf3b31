"""Hostile message values, in bulk: each one certain not to validate, built from good templates.

Hypothesis draws a seed and a handful of hostile atoms (numbers, strings, bytes); `batch` then
expands them cheaply into many values, so that a test throws 100,000 values in a few seconds.
Every value `batch` returns is invalid by construction (a bad time, an unknown type, a bad
version, invalid UTF-8, a truncated or non-object JSON, nesting past the parser's limit, an
unsafe or oversized node name, a null value): a consumer must dead-letter each of them.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PER_EXAMPLE = 1_000
EXAMPLES = 100  # 100 x 1,000 = 100,000 hostile values per consumer
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

atoms = st.lists(st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**200), 2**200),
    st.text(max_size=40), st.binary(max_size=40), st.none(), st.booleans(),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
), min_size=4, max_size=16)
seeds = st.integers(0, 2**32 - 1)

BAD_TIMES: list[Any] = [float("nan"), float("inf"), float("-inf"), 1e300, -1e300, -1.0, 10**30, -(10**30),
                        "soon", "", [], {}, [1.0], {"ts": 1.0}, None]
DEEP = "[" * 3000 + "]" * 3000


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


def hostile(rng: random.Random, template: dict, atom_pool: list) -> bytes | None:
    """One value that cannot validate: `template` (a good event as a dict) broken one way."""
    good = _dumps(template)
    kind = rng.randrange(11)
    if kind == 0:  # a time no clock shows: NaN, infinities, 1e300, negative, or not a number
        field = rng.choice([f for f in ("ts", "first_ts") if f in template])
        bad = rng.choice(BAD_TIMES + [a for a in atom_pool if isinstance(a, str | list | dict) or a is None])
        if isinstance(bad, str):
            bad = "not a time: " + bad  # a numeric string would be read as a number
        return _dumps({**template, field: bad})
    if kind == 1:  # a type no contract has
        return _dumps({**template, "type": f"unknown_{rng.choice(atom_pool)!r}"[:200]})
    if kind == 2:  # a version that is not a positive integer
        return _dumps({**template, "v": rng.choice([0, -1, -(2**70), 2**70, 1.5, "two", None, [2]])})
    if kind == 3:  # invalid UTF-8 somewhere in the value
        cut = rng.randrange(len(good) + 1)
        junk = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])
        return good[:cut] + junk + good[cut:]
    if kind == 4:  # cut short
        return good[:rng.randrange(len(good))]
    if kind == 5:  # JSON that is not an object
        return _dumps(rng.choice([a for a in atom_pool if not isinstance(a, dict | bytes)] or [1]))
    if kind == 6:  # nesting past the parser's limit, in a field nobody knows
        return good[:-1] + b', "extra": ' + DEEP.encode() + b"}"
    if kind == 7 and "node" in template:  # an unsafe or oversized host name
        atom = rng.choice([a for a in atom_pool if isinstance(a, str)] or [""])
        name = rng.choice([atom + " /;\x00", "x" * rng.randrange(254, 5000), ""])
        return _dumps({**template, "node": name})
    if kind == 8:  # no event time
        return _dumps({k: v for k, v in template.items() if k != "ts"})
    if kind == 9:  # raw bytes
        atom = rng.choice([a for a in atom_pool if isinstance(a, bytes)] or [b""])
        return b"\xff" + atom
    return None  # a null value (a tombstone) where an event belongs


def batch(rng: random.Random, templates: list[dict], atom_pool: list,
          n: int = PER_EXAMPLE) -> list[bytes | None]:
    return [hostile(rng, rng.choice(templates), atom_pool) for _ in range(n)]


def interleave(rng: random.Random, good: list, bad: list) -> list[tuple[bool, Any]]:
    """`good` in its order with `bad` scattered between: (is_good, item)."""
    slots = sorted(rng.randrange(len(good) + 1) for _ in bad)
    out, b = [], 0
    for i, item in enumerate(good):
        while b < len(bad) and slots[b] <= i:
            out.append((False, bad[b]))
            b += 1
        out.append((True, item))
    out += [(False, item) for item in bad[b:]]
    return out


class Tally:
    """Hostile values thrown across a test's examples, for the assertion at its end."""

    def __init__(self) -> None:
        self.thrown = 0
        self.dead_lettered = 0
