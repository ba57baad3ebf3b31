"""The fault-script grammar: one line such as `xid=79,node=n02,gpu=3,at=30s` per fault, parsed into a
frozen value (docs/producers.md, "Fault-injection grammar").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import parse_duration


class FaultSpecError(ConfigError):
    """A fault spec that does not parse; the message names the spec and what is wrong."""


@dataclass(frozen=True, kw_only=True)
class GpuFault:
    """Where and when a GPU fault strikes: `None` for node or gpu means all of them."""

    at_s: float = 0.0
    node: str | None = None
    gpu: int | None = None

    def targets(self, node: str, gpu: int) -> bool:
        return self.node in (None, node) and self.gpu in (None, gpu)


@dataclass(frozen=True, kw_only=True)
class XidFault(GpuFault):
    """The driver reports Xid `code` once (79: fallen off the bus, 48: DBE, 74: NVLink...)."""

    code: int


@dataclass(frozen=True, kw_only=True)
class EccFault(GpuFault):
    """`count` more corrected (sbe) or uncorrected (dbe) ECC errors."""

    kind: Literal["sbe", "dbe"]
    count: int = 1


@dataclass(frozen=True, kw_only=True)
class NvlinkFault(GpuFault):
    """`errors` more NVLink CRC/replay/recovery errors."""

    errors: int


@dataclass(frozen=True, kw_only=True)
class ThermalFault(GpuFault):
    """Hardware (`hw_thermal`) or software (`sw_thermal`) throttling, for `for_s` or for good."""

    kind: Literal["hw", "sw"]
    for_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuLostFault(GpuFault):
    """The GPU stops answering: no more samples from it."""


@dataclass(frozen=True, kw_only=True)
class LinkFlap:
    """A data-plane link reports down from `at_s` for `for_s` seconds, then up again."""

    link: str
    at_s: float = 0.0
    for_s: float = 3.0
    node: str | None = None

    def down(self, elapsed_s: float) -> bool:
        return self.at_s <= elapsed_s < self.at_s + self.for_s


# A synthetic hardware fault the producers inject: one of a GPU's, or a NIC's link flap.
HardwareFault = XidFault | EccFault | NvlinkFault | ThermalFault | GpuLostFault | LinkFlap


@dataclass(frozen=True)
class _Kind:
    """What one fault kind accepts: whether it has a value, and its optional keys."""

    keys: frozenset[str]
    value: str | None  # a description of the value, or None for a bare word (`lost`)


_GPU_KEYS = frozenset({"node", "gpu", "at"})
KINDS: dict[str, _Kind] = {
    "xid": _Kind(_GPU_KEYS, "an Xid code (a positive integer)"),
    "ecc": _Kind(_GPU_KEYS | {"count"}, "sbe or dbe"),
    "nvlink": _Kind(_GPU_KEYS, "a positive number of errors"),
    "thermal": _Kind(_GPU_KEYS | {"for"}, "hw or sw"),
    "lost": _Kind(_GPU_KEYS, None),
    "flap": _Kind(frozenset({"node", "at", "for"}), "a link name, e.g. eth0"),
}


def parse_fault(spec: str) -> HardwareFault:
    """One fault from its spec; raises FaultSpecError saying what is wrong and what is allowed."""
    try:
        return _parse(spec)
    except ValueError as err:
        raise FaultSpecError(f"bad fault {spec!r}: {err}") from None


def _parse(spec: str) -> HardwareFault:
    parts = [p.strip() for p in spec.split(",")]
    if not parts[0]:
        raise ValueError(f"empty; start with one of {', '.join(KINDS)}")
    kind, has_value, value = parts[0].partition("=")
    kind = kind.strip()
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
    rules = KINDS[kind]
    if rules.value is None and has_value:
        raise ValueError(f"{kind} takes no value")
    if rules.value is not None and not value.strip():
        raise ValueError(f"{kind} needs a value: {kind}=<{rules.value}>")
    keys: dict[str, str] = {}
    for part in parts[1:]:
        key, eq, val = (text.strip() for text in part.partition("="))
        if not eq or not key or not val:
            raise ValueError(f"{part!r} is not key=value")
        if key not in rules.keys:
            raise ValueError(f"unknown key {key!r} for {kind}; known: {', '.join(sorted(rules.keys))}")
        if key in keys:
            raise ValueError(f"{key} given twice")
        keys[key] = val
    return _build(kind, value.strip(), keys)


def _build(kind: str, value: str, keys: dict[str, str]) -> HardwareFault:
    at_s = parse_duration(keys["at"]) if "at" in keys else 0.0
    node = keys.get("node")
    if kind == "flap":
        for_s = parse_duration(keys["for"]) if "for" in keys else 3.0
        if for_s <= 0:
            raise ValueError("for must be longer than 0s")
        return LinkFlap(link=value, at_s=at_s, for_s=for_s, node=node)
    where = {"at_s": at_s, "node": node, "gpu": _count(keys["gpu"], "gpu", 0) if "gpu" in keys else None}
    if kind == "xid":
        return XidFault(code=_count(value, "xid", 1), **where)
    if kind == "ecc":
        if value not in ("sbe", "dbe"):
            raise ValueError(f"ecc must be sbe or dbe, not {value!r}")
        count = _count(keys["count"], "count", 1) if "count" in keys else 1
        return EccFault(kind=value, count=count, **where)
    if kind == "nvlink":
        return NvlinkFault(errors=_count(value, "nvlink", 1), **where)
    if kind == "thermal":
        if value not in ("hw", "sw"):
            raise ValueError(f"thermal must be hw or sw, not {value!r}")
        for_s = parse_duration(keys["for"]) if "for" in keys else None
        return ThermalFault(kind=value, for_s=for_s, **where)
    return GpuLostFault(**where)


def _count(text: str, name: str, minimum: int) -> int:
    if not text.strip().isdigit() or int(text) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {text!r}")
    return int(text)
