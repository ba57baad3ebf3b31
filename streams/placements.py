"""The detector's check of a worker event's placement: the coordinator's signature over the placement of
the rank's generation on its node (the core's `Placed`, streams/core/placement.py), made from the
coordinator's public keys in the detector's keys folder and loaded again as they change, as an
executor's are (docs/detection.md, "Generations come from the coordinator").
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from trainmedic.recovery.key_folders import KeyFolder
from trainmedic.recovery.keyring import coordinator_keys
from trainmedic.recovery.signing import TrustedKeys, Unverified
from trainmedic.schemas.commands import Placement
from trainmedic.streams.core.placement import Placed

MAX_CACHED = 4_096  # placements verified, by signature: every rank a command starts shows the same one
KEYS_LOOK_S = 1.0  # the keys folder is looked at this often at most: a key revoked counts within it
# Placements that fail to verify, per sending node and window: beyond, refused unchecked (a verification
# took ~0.26 ms in an ad-hoc timeit; a node must not buy the detector's time with forgeries).
MAX_FAILED, FAILED_WINDOW_S = 64, 10.0


class PlacementCheck:
    """`check(raw, node)`: the placement `raw` is (JSON), sent by `node`, when a trusted coordinator key
    signed it for deployment `prefix`; else None. Verified placements are kept by signature (least
    recently used out), so a node's ranks cost one verification; a change of the trusted keys (looked
    at once a second at most, cache hits included) forgets them. A node whose placements fail
    MAX_FAILED times in a window has the rest of that window's refused unchecked."""

    def __init__(self, keys: KeyFolder[TrustedKeys], prefix: str, max_cached: int = MAX_CACHED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._keys, self._prefix, self._max, self._clock = keys, prefix, max_cached, clock
        self._trusted: TrustedKeys = TrustedKeys({})
        self._looked = float("-inf")
        self._verified: OrderedDict[str, Placement] = OrderedDict()
        self._failed: dict[str, tuple[float, int]] = {}  # node -> (its window's start, failures in it)

    def __call__(self, raw: str, node: str) -> Placement | None:
        now = self._clock()
        trusted = self._current(now)
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
        since, failures = self._failed.get(node, (now, 0))
        if now - since >= FAILED_WINDOW_S:
            since, failures = now, 0
        if failures >= MAX_FAILED:
            return None
        try:
            trusted.signer(raw, "placement", self._prefix)
        except Unverified:
            if len(self._failed) >= MAX_CACHED:
                self._failed.clear()
            self._failed[node] = (since, failures + 1)
            return None
        self._verified[placement.signature] = placement
        if len(self._verified) > self._max:
            self._verified.popitem(last=False)
        return placement

    def _current(self, now: float) -> TrustedKeys:
        """The trusted keys, the folder looked at again when KEYS_LOOK_S passed; a change forgets the
        placements verified with the keys before."""
        if now - self._looked >= KEYS_LOOK_S:
            self._looked = now
            trusted = self._keys.trusted()
            if trusted is not self._trusted:
                self._trusted = trusted
                self._verified.clear()
        return self._trusted


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
