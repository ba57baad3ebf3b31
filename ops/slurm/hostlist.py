"""Slurm's host lists (`n[01-03,7],gpu5`) as node names, in Slurm's order. Pure: the allocation's
node list is read from the environment without a call to `scontrol show hostnames`."""

from __future__ import annotations

import re

MAX_NAMES = 100_000  # more names than any cluster has: a list that expands further is refused
_GROUP = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    """A host list that is not one, or one that names too many hosts."""


def expand(hostlist: str, limit: int = MAX_NAMES) -> list[str]:
    """Every name of `hostlist`, in order, without repeats."""
    names: dict[str, None] = {}  # ordered, each once
    for item in _split(hostlist.strip()):
        names.update(dict.fromkeys(_expand_item(item, limit - len(names))))
    if not names:
        raise HostlistError(f"host list {hostlist!r} names no host")
    return list(names)


def _split(hostlist: str) -> list[str]:
    """The comma-separated items, commas inside brackets kept."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(hostlist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise HostlistError(f"host list {hostlist!r}: unbalanced brackets")
        if char == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"host list {hostlist!r}: unbalanced brackets")
    items.append(hostlist[start:])
    return [item for item in items if item]


def _expand_item(item: str, room: int) -> list[str]:
    """One item's names: each bracket group's numbers, zero padding kept, in every combination."""
    match = _GROUP.search(item)
    if match is None:
        if "[" in item or "]" in item or not item:
            raise HostlistError(f"host list item {item!r} is not a name")
        return [item]
    head, tail = item[: match.start()], item[match.end():]
    rests = _expand_item(tail, room) if tail else [""]
    names = []
    for number in _numbers(match.group(1), item):
        for rest in rests:
            names.append(f"{head}{number}{rest}")
            if len(names) > room:
                raise HostlistError(f"host list names more than {MAX_NAMES} hosts")
    return names


def _numbers(group: str, item: str) -> list[str]:
    numbers: list[str] = []
    for part in group.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise HostlistError(f"host list item {item!r}: {part!r} is not a number or a range")
        first, last = int(low), int(high) if sep else int(low)
        if last < first or last - first >= MAX_NAMES:
            raise HostlistError(f"host list item {item!r}: range {part!r} is empty or too long")
        numbers += [str(n).zfill(len(low)) for n in range(first, last + 1)]
    return numbers
