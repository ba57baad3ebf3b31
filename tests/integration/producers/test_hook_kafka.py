"""The training hook through the real broker, and with no broker at all."""

from __future__ import annotations

import pytest

from bus.settings import KafkaSettings, credentials_dir
from producers.hook import Hook, HookConfig
from schemas import WorkerFailed, WorkerStarted, WorkerStepped
from tests.integration.producers.consume import consume_until


@pytest.mark.kafka
def test_a_rank_reports_its_start_steps_and_error(kafka: KafkaSettings, group_id: str) -> None:
    env = {"TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap, "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix,
           "TRAINMEDIC_JOB": "gpt-j", "RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3",
           "TRAINMEDIC_NODE": "n04", "TRAINMEDIC_GENERATION": "1",
           "TRAINMEDIC_CREDENTIALS_DIR": str(credentials_dir())}  # it writes as the rank principal
    with Hook.from_env(env) as hook:
        hook.started()
        for step in range(50):
            hook.step(step, 0.05)
        with pytest.raises(RuntimeError), hook.capture():
            raise RuntimeError("NCCL error: unhandled system error")
    assert hook.dropped == 0

    records = consume_until(kafka, kafka.topics.worker, group_id, lambda rs: len(rs) >= 52)
    assert len(records) == 52 and {r.key for r in records} == {"gpt-j"}
    events = [r.event for r in records]  # one key, so one partition, so in order
    assert isinstance(events[0], WorkerStarted)
    assert [e.step for e in events[1:51] if isinstance(e, WorkerStepped)] == list(range(50))
    assert isinstance(events[51], WorkerFailed)
    assert events[51].error == "RuntimeError: NCCL error: unhandled system error"
    identities = {(e.job, e.rank, e.world_size, e.node, e.generation) for e in events}
    assert identities == {("gpt-j", 3, 8, "n04", 1)}


def test_with_the_broker_away_steps_never_wait_memory_stays_bounded_and_every_loss_is_counted() -> None:
    env = {"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1", "TRAINMEDIC_JOB": "gpt-j"}  # a closed port
    config = HookConfig(queue_size=100, max_buffered=200, flush_timeout_s=0.2)
    hook = Hook.from_env(env, config=config)
    for step in range(20_000):
        hook.step(step, 0.05)
    assert hook.queued <= 100
    assert hook.dropped >= 20_000 - 100 - 200 - config.batch_size  # queue + librdkafka + one batch in hand
    hook.close()
    assert hook.dropped == 20_000  # nothing was delivered, and nothing went uncounted
