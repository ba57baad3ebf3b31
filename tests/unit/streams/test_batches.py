"""The ingest stage's batches: the format, each source offset applied once whatever is sent again,
and the scenarios decided through ingest and decider exactly as by one detector."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import schemas as s
from bus.message import RawMessage
from schemas import wire
from streams.batches import (
    Batch,
    Carriers,
    Entry,
    SourceOffsets,
    decode_batch,
    encode_batch,
    events_partition,
)
from streams.checkpoint import decode_checkpoint, encode_checkpoint
from streams.core import Detector
from streams.decider import new_events
from streams.ingest import wire_event
from streams.live import LiveConfig, LiveDetector
from streams.pipeline import Pipeline
from tests.unit.streams.test_checkpoint import arrivals
from tests.unit.streams.test_scenarios import NAMES

FLUSH_S = 0.05  # IngestConfig.flush_every_s
CONFIG = LiveConfig(lateness_s=0.5, release_every_s=0.0, max_skew_s=1e10)  # the recordings are from 2023


def entry(offset: int, ts: float = 1.0) -> Entry:
    return Entry(offset, 1000, b"node-00", wire.NodeHeartbeat(ts=ts, node="node-00", interval=1.0))


def batch(first: int, next_: int, offsets: list[int]) -> Batch:
    return Batch("gpu", 0, first, next_, [entry(o) for o in offsets])


def test_a_batch_round_trips_with_its_events_as_decoded() -> None:
    sample = wire.decode_telemetry(s.encode(s.GpuSample(ts=5.0, node="n1", gpu=3, xids=[79], temp_c=80.0)))
    sent = Batch("acme.telemetry.gpu", 7, 10, 13,
                 [Entry(10, 5000, b"n1", sample), Entry(12, 5001, None, sample)])
    got = decode_batch(encode_batch(sent))
    assert encode_batch(got) == encode_batch(sent) and got.source == ("acme.telemetry.gpu", 7)
    # read back as the trusted twin: the same values, a subclass the core takes alike
    assert type(got.entries[0].event) is wire.TRUSTED[wire.GpuSample]
    assert isinstance(got.entries[0].event, wire.GpuSample) and got.entries[0].event.xids == (79,)


def test_what_is_not_a_batch_is_refused() -> None:
    import msgspec

    for junk in (b"", b"\x93\x01\x02\x03", s.encode(s.NodeHeartbeat(ts=1.0, node="n", interval=1.0))):
        with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
            decode_batch(junk)


@pytest.mark.parametrize("ts", [float("nan"), float("inf"), 1e307, -1.0])
def test_an_event_time_ingest_never_sends_is_dead_lettered_not_held(ts: float) -> None:
    """The decider decodes batches without the contract's bounds (ingest checked them): an event time
    out of them would stop it at every restart, so it goes to the dlq, and the others are held."""
    sent = Batch("gpu", 0, 5, 8, [entry(5, 1.0), entry(6, ts), entry(7, 2.0)])
    held, dead = new_events(SourceOffsets(), decode_batch(encode_batch(sent)), "dlq", 9.0)
    assert [(ts, origin.offset) for ts, _, origin in held] == [(1.0, 5), (2.0, 7)]
    [letter] = dead
    assert letter.topic == "dlq" and b"out of bounds" in letter.value
    live = LiveDetector(Detector(), CONFIG)
    live.feed_many([(sent.source, held)], 9.0)
    for n in range(1, 30):
        live.tick(9.0 + n * 0.25)
    assert live.buffered == 0 and live.detector.state.clock >= 2.0


def test_each_source_offset_is_applied_once_whatever_is_sent_again() -> None:
    seen = SourceOffsets()
    assert seen.new_entries(batch(5, 5, [])) == []  # an instance announces where it starts
    assert [e.offset for e in seen.new_entries(batch(5, 9, [5, 6, 8]))] == [5, 6, 8]  # 7 was dead-lettered
    assert seen.new_entries(batch(5, 9, [5, 6, 8])) == []  # the same again (a dead instance's, read anew)
    assert [e.offset for e in seen.new_entries(batch(6, 12, [6, 8, 9, 11]))] == [9, 11]  # overlapping
    assert seen.new_entries(batch(12, 12, [])) == []  # a new owner announces itself
    assert seen.next == {("gpu", 0): 12} and seen.repeated == 5 and seen.gaps == 0


def test_a_batch_past_a_gap_is_taken_and_counted() -> None:
    """Messages the decider never got (retention removed them before an instance read them): what
    comes after is still used."""
    seen = SourceOffsets({("gpu", 0): 10})
    assert [e.offset for e in seen.new_entries(batch(20, 22, [20, 21]))] == [20, 21]
    assert seen.gaps == 1 and seen.next[("gpu", 0)] == 22


def test_every_batch_of_a_partition_goes_to_one_events_partition() -> None:
    spread = {events_partition(("acme.telemetry.gpu", p), 12) for p in range(12)}
    assert events_partition(("acme.telemetry.gpu", 3), 12) == events_partition(("acme.telemetry.gpu", 3), 12)
    assert len(spread) > 4  # a stable hash, spread over the events topic


def test_an_event_the_contract_model_took_travels_as_its_fast_twin() -> None:
    error = "RuntimeError: d\u00e9j\u00e0 vu"
    raw = s.encode(s.WorkerFailed(ts=1.0, node="n1", job="j", rank=2, generation=0, world_size=4,
                                  error=error))
    raw = raw.replace(b'"rank":2', b'"rank":2.0')
    lax = wire.decode_telemetry(raw)  # not ASCII, and a lax rank: the contract model decides
    assert not isinstance(lax, wire.KINDS)
    fast = wire_event(lax)
    assert isinstance(fast, wire.WorkerFailed) and (fast.rank, fast.error) == (2, error)


@pytest.mark.parametrize("name", NAMES)
def test_ingest_and_decider_decide_as_one_detector_with_batches_sent_twice(name: str) -> None:
    """Each partition's messages validated by the ingest stage's pipeline and sent in batches every
    FLUSH_S of wall time, as the ingest service does, every batch sent again ahead of the next (an
    instance that died before committing, its partitions read again by another): the decider applies
    each offset once and decides exactly what one detector decides."""
    items = arrivals(name)
    whole = Pipeline(s.Topics(), LiveDetector(Detector(), CONFIG))
    ingest = Pipeline(s.Topics(), None, max_skew_s=CONFIG.max_skew_s)
    decider = Pipeline(s.Topics(), LiveDetector(Detector(), CONFIG))
    seen = SourceOffsets()
    offsets: dict[tuple, int] = {}
    pending: dict[tuple, list[Entry]] = {}
    last: dict[tuple, Batch] = {}
    expected, got = [], []

    def flush(wall: float) -> list:  # what the decider reads of it, in one fetch
        runs = []
        for source, entries in pending.items():
            batch = Batch(*source, entries[0].offset, entries[-1].offset + 1, entries)
            for sent in [last[source], batch] if source in last else [batch]:
                held, dead = new_events(seen, decode_batch(encode_batch(sent)), "dlq", wall)
                assert not dead
                runs += [(source, held)] if held else []
            last[source] = batch
        pending.clear()
        return decider.on_runs(runs, wall) if runs else []

    flushed = float("-inf")
    for wall, source, event in items:
        if wall - flushed >= FLUSH_S:
            got += flush(wall)
            flushed = wall
        offset = offsets[source] = offsets.get(source, -1) + 1
        message = RawMessage(*source, offset, int(event.ts * 1000), event.node.encode(), s.encode(event))
        expected += whole.on_message(message, wall)
        checked, message, dead = ingest.check(message, wall)
        assert not dead
        fast = wire_event(checked)
        pending.setdefault(source, []).append(Entry(offset, message.timestamp_ms, message.key, fast))
    got += flush(items[-1][0])
    for tick in range(1, 121):  # a minute of silence after the end: lost nodes are decided too
        expected += whole.on_tick(items[-1][0] + tick / 2)
        got += decider.on_tick(items[-1][0] + tick / 2)
    assert seen.repeated > 0
    assert incidents(got) == incidents(expected) and incidents(expected)


def incidents(outs) -> list[tuple[bytes, bytes]]:
    return [(out.key, out.value) for out in outs if out.topic == s.Topics().incidents]


def test_batches_of_big_events_are_split_under_the_size_limit_covering_every_offset() -> None:
    """Tracebacks of a megabyte each (a mass failure): each batch stays under MAX_BATCH_BYTES, and
    together they cover the offsets of the whole read, in order, with none lost."""
    from streams.batches import MAX_BATCH_BYTES
    from streams.ingest import _encoded

    big = wire.WorkerFailed(ts=1.0, node="n1", job="j", rank=0, world_size=8, error="x" * 1_000_000)
    entries = [Entry(offset, 1000, b"j", big) for offset in range(10, 30, 2)]  # odd offsets dead-lettered
    pieces = [decode_batch(data) for data in _encoded(("worker", 3), 10, 31, entries)]
    assert len(pieces) > 2 and all(len(encode_batch(p)) <= MAX_BATCH_BYTES for p in pieces)
    assert [(p.first, p.next) for p in pieces][0][0] == 10 and pieces[-1].next == 31
    assert all(a.next == b.first for a, b in zip(pieces, pieces[1:], strict=False))
    assert [e.offset for p in pieces for e in p.entries] == list(range(10, 30, 2))


@pytest.mark.parametrize("name", NAMES)
def test_a_decider_checkpoint_leaves_what_waits_to_the_events_topic_and_resumes_exactly(name: str) -> None:
    """A decider reading a backlog (each partition's events in batches of 40, so one partition runs
    ahead of another) holds few (`order_at` 30) and leaves the rest waiting. Its checkpoint does not
    save what waits: the events topic is read again from the message that carried the first of them,
    and `SourceOffsets` takes only those from there. Restored from a checkpoint taken half-way, it
    decides exactly what it decides uninterrupted. (Saved, a backlog's took checkpoints past their
    limit: a tombstone, and a restart afresh.)"""
    config = LiveConfig(lateness_s=0.5, release_every_s=0.0, max_skew_s=1e10, order_at=30, pause_at=30)
    topic: list[tuple[bytes, float]] = []  # the events topic (one partition): batches as sent, and when
    pending: dict[tuple, list[Entry]] = {}
    items = arrivals(name)
    for n, (wall, source, event) in enumerate(items):
        entries = pending.setdefault(source, [])
        entries.append(Entry(n, int(wall * 1000), event.node.encode(), wire_event(event)))
        if len(entries) == 40 or n == len(items) - 1:
            for full in [source] if n < len(items) - 1 else list(pending):
                sent = pending.pop(full)
                topic.append((encode_batch(Batch(*full, sent[0].offset, sent[-1].offset + 1, sent)), wall))
    where = ("events", 0)

    def decider(live: LiveDetector, seen: SourceOffsets, carriers: Carriers, first: int, last: int,
                then: Callable[[int], bool] = lambda _: False) -> tuple[Pipeline, list, int]:
        """Read the events topic from `first` up to `last`, or until `then(offset)` after one."""
        pipeline, out = Pipeline(s.Topics(), live), []
        for offset in range(first, last):
            value, wall = topic[offset]
            batch = decode_batch(value)
            held, dead = new_events(seen, batch, "dlq", wall)
            assert not dead
            if held:
                carriers.carried(batch, where, offset)
                out += pipeline.on_runs([(batch.source, held)], wall)
            if then(offset):
                return pipeline, out, offset + 1
        end = topic[-1][1]
        for tick in range(1, 121):  # a minute of silence after the end: lost nodes are decided too
            out += pipeline.on_tick(end + tick / 2)
        return pipeline, out, last

    _, expected, _ = decider(LiveDetector(Detector(), config), SourceOffsets(), Carriers(), 0, len(topic))
    live, seen, carriers = LiveDetector(Detector(), config), SourceOffsets(), Carriers()
    _, before, read = decider(live, seen, carriers, 0, len(topic),
                              then=lambda offset: offset >= len(topic) // 2 and bool(live.waiting()))
    waiting = sum(live.waiting().values())
    assert read < len(topic) and waiting, "stopped with nothing waiting: the rewind is not exercised"
    offsets = carriers.rewind({where: read}, live.waiting_entries()) | seen.next
    saved = decode_checkpoint(encode_checkpoint(live, offsets, topic[read - 1][1], rewind=True))
    assert len(saved.held) == live.buffered - waiting  # what waits is left to the events topic
    assert saved.offsets[where] < read
    resumed = LiveDetector(Detector(), config)
    saved.restore(resumed, topic[read - 1][1])
    again = SourceOffsets({tp: offset for tp, offset in saved.offsets.items() if tp != where})
    _, after, _ = decider(resumed, again, Carriers(), saved.offsets[where], len(topic))
    assert incidents(before + after) == incidents(expected) and incidents(expected)
