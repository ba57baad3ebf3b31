"""Deterministic incident ids: the same evidence gives the same id, live or replayed."""

from __future__ import annotations

import hashlib


def incident_id(category: str, scope: str, key: str, ts: float) -> str:
    """`category-<12 hex>` from the category, the job or node, the root evidence's key
    fields and its event time (to the millisecond). Never a clock, never random."""
    text = f"{category}|{scope}|{key}|{ts:.3f}"
    return f"{category}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
