"""`local_deployment`, which the demo runs in, against a real broker: it creates its prefix's topics
and, asked to replace earlier runs, deletes theirs first (the demo keeps only its latest run's)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

from trainmedic.bus.admin import list_topics
from trainmedic.bus.settings import KafkaSettings
from trainmedic.local.cluster import local_deployment

pytestmark = pytest.mark.kafka


def test_a_new_run_deletes_the_topics_of_earlier_ones_and_keeps_its_own(
        deployment: Callable[..., KafkaSettings], monkeypatch: pytest.MonkeyPatch) -> None:
    stem = f"t{uuid.uuid4().hex[:8]}-"
    earlier, latest = deployment(f"{stem}0ld."), deployment(f"{stem}1a7.")  # latest: for teardown
    other = deployment(f"{stem}users-own.")  # the stem, but not a generated prefix: kept
    monkeypatch.setenv("TRAINMEDIC_KAFKA_BOOTSTRAP", earlier.bootstrap)
    said: list[str] = []
    with local_deployment(latest.topic_prefix, said.append, replacing=re.compile(rf"{stem}[0-9a-z]{{3}}\.")):
        names = list_topics(latest)
        assert not [name for name in names if name.startswith(earlier.topic_prefix)]
        for kept in (latest, other):
            ours = [name for name in names if name.startswith(kept.topic_prefix)]
            assert len(ours) == len(kept.topics.all())
    assert any(f"deleted the {len(earlier.topics.all())} topics of 1 earlier run" in line for line in said)
