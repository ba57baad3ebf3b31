"""`trainmedic topics list`: the deployment's own topics, as the broker has them."""

from __future__ import annotations

from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.topics import print_topics
from trainmedic.schemas import Topics


def test_names_a_deployment_owns_carry_its_prefix() -> None:
    assert Topics("acme.").owned("detector") == "acme.detector"
    assert Topics("acme.").owned("alerts") != Topics("acme-staging.").owned("alerts")


def test_internal_topics_are_those_under_the_deployments_own_names() -> None:
    names = {"acme.detector-checkpoints", "acme.detector-__assignor-__leader", "acme.incidents",
             "other.detector-checkpoints", "acme.detectorx", "trainmedic-detector-checkpoints"}
    assert Topics("acme.").internal(names) == ["acme.detector-__assignor-__leader",
                                               "acme.detector-checkpoints"]


def test_list_marks_each_topic_created_or_missing_and_adds_internal_ones(capsys) -> None:
    settings = KafkaSettings(topic_prefix="acme.")
    print_topics(settings, {"acme.incidents": 6, "acme.telemetry.gpu": 2, "acme.detector-checkpoints": 1,
                            "other.jobs": 1})
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["acme.incidents"].endswith("created, 6 partitions")
    assert lines["acme.telemetry.gpu"].endswith("created, 2 partitions")
    assert lines["acme.jobs"].endswith("missing")
    assert "internal" in lines["acme.detector-checkpoints"]
    assert "other.jobs" not in lines
    assert len(lines) == len(Topics("acme.").all()) + 1
