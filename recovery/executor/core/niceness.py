"""A rank command's `nice -n N` prefix, read the same way by admission and by the warm launcher."""

from __future__ import annotations

import re
from collections.abc import Sequence

NICENESS = re.compile(r"-?[0-9]{1,6}", re.ASCII)  # a `nice -n` value; the kernel clamps what is out of range


def split_nice(argv: Sequence[str]) -> tuple[int, list[str]] | None:
    """(niceness, the command after `nice -n N`), (0, argv) without the prefix, or None when N is not
    ASCII digits in nice's form (`str.isdigit` also takes `²`, which `int` refuses): `nice`'s to judge."""
    rest = list(argv)
    if rest[:2] != ["nice", "-n"] or len(rest) < 3:
        return 0, rest
    return (int(rest[2]), rest[3:]) if NICENESS.fullmatch(rest[2]) else None
