"""Where a topic reader starts and stops, from watermarks and offsets-by-time: no broker needed."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from trainmedic.bus import reader
from trainmedic.bus.reader import (
    END_GRACE_S,
    NOW,
    At,
    end_due,
    end_offsets,
    partition_of,
    start_offsets,
    watermarks,
)

A, B = ("t", 0), ("t", 1)
MARKS = {A: (5, 10), B: (0, 0)}  # A holds 5..9; B is empty


def test_earliest_and_latest_are_concrete_offsets() -> None:
    assert start_offsets("earliest", MARKS) == {A: 5, B: 0}
    assert start_offsets("latest", MARKS) == {A: 10, B: 0}


def test_one_offset_for_every_partition_is_kept_inside_what_each_holds() -> None:
    assert start_offsets(7, MARKS) == {A: 7, B: 0}
    assert start_offsets(2, MARKS) == {A: 5, B: 0}
    assert start_offsets(99, MARKS) == {A: 10, B: 0}


def test_offsets_per_partition_are_kept_inside_what_each_holds() -> None:
    assert start_offsets({A: 8, B: 0}, MARKS) == {A: 8, B: 0}
    assert start_offsets({A: 1, B: 3}, MARKS) == {A: 5, B: 0}  # retention removed 1; 3 is past the end


def test_a_start_time_with_nothing_at_or_after_it_starts_at_the_end() -> None:
    assert start_offsets(At(100.0), MARKS, {A: 7, B: -1}) == {A: 7, B: 0}
    assert start_offsets(At(100.0), MARKS, {A: -1, B: -1}) == {A: 10, B: 0}


def test_no_end_and_the_end_of_now() -> None:
    assert end_offsets(None, MARKS) == {A: None, B: None}
    assert end_offsets(NOW, MARKS) == {A: 10, B: 0}


def test_an_end_time_is_unknown_until_due_then_the_first_offset_at_or_after_it() -> None:
    end = At(1000.0)
    assert end_offsets(end, MARKS) == {A: None, B: None}
    assert end_offsets(end, MARKS, {A: 6, B: -1}) == {A: 6, B: 0}
    assert end_offsets(end, MARKS, {A: -1, B: -1}) == {A: 10, B: 0}


def test_an_end_time_is_due_only_after_the_grace_for_messages_in_flight() -> None:
    end = At(1000.0)
    assert not end_due(end, 1000.0)
    assert not end_due(end, 1000.0 + END_GRACE_S - 0.1)
    assert end_due(end, 1000.0 + END_GRACE_S)
    assert not end_due(NOW, 1e12) and not end_due(None, 1e12)


def test_at_is_in_milliseconds_for_the_broker() -> None:
    assert At(1.2345).ms == 1234


def test_partition_of_is_crc32_modulo_the_count() -> None:
    assert partition_of("n1", 1) == 0
    assert {partition_of(f"node-{i}", 4) for i in range(40)} == {0, 1, 2, 3}
    with pytest.raises(ValueError):
        partition_of("n1", 0)


class Leaderless:
    """A consumer whose broker refuses watermark requests (error codes) a partition at a time: `errors`
    first for partition 0, then for 1, and answers (0, 5) once a partition's are used up; `forever`
    for a partition refuses it always. Counts the requests."""

    def __init__(self, *errors: int, forever: int | None = None) -> None:
        self.errors, self.forever, self.asked = list(errors), forever, 0

    def get_watermark_offsets(self, partition, timeout):
        self.asked += 1
        if partition.partition == self.forever:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 5


class Clock:
    """`reader`'s time: requests take none, each wait moves it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_partition_whose_leader_is_moving_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "time", Clock())
    client = Leaderless(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert watermarks(client, [A, B], timeout_s=5) == {A: (0, 5), B: (0, 5)}
    assert client.asked == 4


def test_a_partition_the_clients_metadata_does_not_hold_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch
                                                                           ) -> None:
    # librdkafka's own error for a topic created a moment ago on another broker of a cluster
    monkeypatch.setattr(reader, "time", Clock())
    client = Leaderless(KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)
    assert watermarks(client, [A, B], timeout_s=5) == {A: (0, 5), B: (0, 5)}
    assert client.asked == 4


def test_any_other_error_and_a_leader_that_never_comes_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(reader, "time", clock)
    client = Leaderless(KafkaError._TRANSPORT)
    with pytest.raises(KafkaException, match="_TRANSPORT"):
        watermarks(client, [A], timeout_s=5)
    assert client.asked == 1
    # A is refused for 4 s (32 waits of 1/8 s), then B always: 5 s is for both together, not for each.
    monkeypatch.setattr(reader, "LEADER_WAIT_S", 0.125)
    client = Leaderless(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 32, forever=B[1])
    with pytest.raises(KafkaException, match="NOT_LEADER_FOR_PARTITION"):
        watermarks(client, [A, B], timeout_s=5)
    assert client.asked == 33 + 8 and clock.now == 4.875
