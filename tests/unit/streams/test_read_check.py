"""ReadCheck: when a detector's reads are known complete (streams/read_check.py)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from trainmedic.bus.settings import KafkaSettings
from trainmedic.streams import read_check
from trainmedic.streams.read_check import ReadCheck

TP = ("t.telemetry.gpu", 0)


class Broker:
    """An admin client whose ListOffsets answers at once: the partition's end, 100 more each 0.25 s."""

    def __init__(self) -> None:
        self.end = 0

    def list_offsets(self, request: dict, request_timeout: float) -> dict:
        answers = {}
        for tp in request:
            future: Future = Future()
            future.set_result(SimpleNamespace(offset=self.end))
            answers[tp] = future
        return answers


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    fake = Broker()
    monkeypatch.setattr(read_check.clients, "admin", lambda settings: fake)
    return fake


def test_a_detector_reading_a_little_behind_is_confirmed_as_of_when_it_asked(broker: Broker) -> None:
    """Data keeps coming, and the detector reads 150 messages (under half a second) behind: each
    answer is kept until the reads reach it. (A newer answer each time was a target it never
    reached: it counted as blind, and event time stood still, at any rate that kept it behind.)"""
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    confirmed = []
    for n in range(40):
        wall = n * 0.25
        broker.end = 100 * n
        if (at := check.poll({TP: max(0, broker.end - 150)}, wall)) is not None:
            confirmed.append(at)
    assert len(confirmed) >= 10 and max(confirmed) >= 8.0


def test_a_detector_reading_two_seconds_behind_is_confirmed_two_seconds_late(broker: Broker) -> None:
    """Not later: every answer is kept, and the newest the reads reach confirms (one kept at a
    time, each confirmation came two lags late, and at 1.5 s behind that was past blind_s)."""
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    trailing = []
    for n in range(80):
        wall = n * 0.25
        broker.end = 100 * n
        if (at := check.poll({TP: max(0, broker.end - 800)}, wall)) is not None:  # 2 s of data behind
            trailing.append(wall - at)
    assert len(trailing) > 60 and max(trailing[5:]) <= 2.25


def test_only_an_answer_about_every_partition_asked_about_now_confirms(broker: Broker) -> None:
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    other = ("t.telemetry.node", 0)
    broker.end = 10
    assert check.poll({TP: 0}, 0.0) is None  # asked about TP alone (`other` paused)
    # `other` read again: the answer about TP alone says nothing of it, and is dropped; asked anew
    assert check.poll({TP: 10, other: 10}, 0.3) is None
    broker.end = 20
    assert check.poll({TP: 10, other: 10}, 0.6) == 0.3  # the answer about both confirms
    assert check.poll({TP: 10, other: 10}, 0.9) is None  # asked at 0.6: 20, not reached
    assert check.poll({TP: 20}, 1.2) == 0.9  # `other` paused again: answers about both confirm TP


def test_a_detector_pausing_and_resuming_a_partition_every_fetch_is_still_confirmed(broker: Broker) -> None:
    """Under load the consumer engine pauses and resumes partitions every few fetches
    (streams/engines/backpressure.py). An answer about one more partition than is read now confirms the
    others; dropped, every answer was, and the detector counted as blind while reading on time."""
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    other = ("t.telemetry.node", 0)
    confirmed = []
    for n in range(40):
        wall = n * 0.25
        broker.end = 100 * n
        reading = {TP: max(0, broker.end - 150)} | ({other: max(0, broker.end - 150)} if n % 2 else {})
        if (at := check.poll(reading, wall)) is not None:
            confirmed.append(at)
    assert len(confirmed) >= 10 and max(confirmed) >= 8.0


def test_a_detector_a_minute_behind_is_still_confirmed_every_few_seconds(broker: Broker) -> None:
    """More answers than are kept (64, 16 s of them): those kept span the lag evenly. (The oldest
    dropped, a detector more than 16 s behind was never confirmed: blind, and event time stood
    still while it read on.)"""
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    confirmed = []
    for n in range(600):  # 150 s, reading 60 s of data behind
        wall = n * 0.25
        broker.end = 100 * n
        if (at := check.poll({TP: max(0, broker.end - 24_000)}, wall)) is not None:
            confirmed.append((wall, at))
    confirmed = confirmed[1:]  # the first: nothing was there to read
    gaps = [b[0] - a[0] for a, b in zip(confirmed, confirmed[1:], strict=False)]
    assert confirmed[0][0] <= 61.0 and confirmed[-1][0] >= 147.0 and max(gaps) < 2.0
    assert all(59.0 <= wall - at <= 61.0 for wall, at in confirmed)


def test_asked_about_no_partition_nothing_is_confirmed(broker: Broker) -> None:
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    broker.end = 10
    assert check.poll({TP: 0}, 0.0) is None
    assert check.poll({}, 0.3) is None  # the answer about TP is there, and says nothing of none
    assert check.poll({TP: 10}, 0.6) == 0.0


def test_a_partition_read_again_after_a_pause_is_covered_by_what_was_asked_meanwhile(broker: Broker) -> None:
    """A detector 20 s behind pauses a partition for 5 s (streams/engines/backpressure.py). The engine
    asks about it all the while (`about`), checking only the reads of the others: once it is read
    again, the answers asked during the pause cover it, and confirmations go on. (Asked about the
    others alone, those answers were dropped at the resume: 5 s with none, a false blind spell.)"""
    check = ReadCheck(KafkaSettings(bootstrap="unused:9092"), every_s=0.25)
    other = ("t.telemetry.node", 0)
    confirmed = []
    for n in range(400):  # 100 s
        wall = n * 0.25
        broker.end = 100 * n
        read = max(0, broker.end - 8_000)
        reading = {TP: read} if 120 <= n < 140 else {TP: read, other: read}
        if check.poll(reading, wall, about=[TP, other]) is not None:
            confirmed.append(wall)
    gaps = [b - a for a, b in zip(confirmed[1:], confirmed[2:], strict=False)]
    assert confirmed[-1] >= 99.0 and max(gaps) < 1.0
