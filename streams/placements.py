"""The detector's check of a worker event's placement: the coordinator's signature over the placement of
the rank's generation on its node (the core's `Placed`, streams/core/placement.py), made from the
coordinator's public keys in the detector's keys folder and loaded again as they change, as an
executor's are (docs/detection.md, "Generations come from the coordinator").
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path

from pydantic import ValidationError

from trainmedic.recovery.keyring import KeyFolder, coordinator_keys
from trainmedic.recovery.signing import TrustedKeys, Unverified
from trainmedic.schemas.commands import Placement
from trainmedic.streams.core.placement import Placed

MAX_CACHED = 4_096  # placements verified, by signature: every rank a command starts shows the same one


class PlacementCheck:
    """`check(raw)`: the placement `raw` is (JSON), when a trusted coordinator key signed it for
    deployment `prefix`; else None. Verified placements are kept by signature (least recently used
    out), so a node's ranks cost one verification; a change of the trusted keys forgets them."""

    def __init__(self, keys: KeyFolder[TrustedKeys], prefix: str, max_cached: int = MAX_CACHED) -> None:
        self._keys, self._prefix, self._max = keys, prefix, max_cached
        self._trusted: TrustedKeys | None = None
        self._verified: OrderedDict[str, Placement] = OrderedDict()

    def __call__(self, raw: str) -> Placement | None:
        try:
            placement = Placement.model_validate_json(raw)
        except (ValidationError, RecursionError):
            return None
        if not placement.signature:
            return None
        known = self._verified.get(placement.signature)
        if known is not None:  # the placement that signature is over, whatever else `raw` says
            self._verified.move_to_end(placement.signature)
            return known
        trusted = self._keys.trusted()
        if trusted is not self._trusted:
            self._trusted = trusted
            self._verified.clear()
        try:
            trusted.signer(raw, "placement", self._prefix)
        except Unverified:
            return None
        self._verified[placement.signature] = placement
        if len(self._verified) > self._max:
            self._verified.popitem(last=False)
        return placement


def placements_of(directory: Path, prefix: str, log: logging.Logger) -> Placed | None:
    """The check from the coordinator's keys in `directory`; without one, said loudly, and None."""
    trusted = coordinator_keys(directory)
    if not trusted.keys:
        log.warning("INSECURE: no coordinator public key in %s (--keys-dir, TRAINMEDIC_DETECTOR_KEYS_DIR): "
                    "placements are not checked, and a job's generation is taken from any worker_start, "
                    "whichever node sends it", directory)
        return None
    log.info("worker events are used only from nodes the coordinator placed (keys %s in %s)", trusted,
             directory)
    return PlacementCheck(KeyFolder(directory, trusted, coordinator_keys), prefix)
