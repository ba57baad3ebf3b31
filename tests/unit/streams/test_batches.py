"""The ingest stage's batches: the format, each source offset applied once whatever is sent again,
and the scenarios decided through ingest and decider exactly as by one detector."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import trainmedic.schemas as s
from tests.unit.streams.test_checkpoint import arrivals
from tests.unit.streams.test_scenarios import NAMES
from trainmedic.bus.message import RawMessage
from trainmedic.schemas import wire
from trainmedic.streams.checkpoints.contents import decode_checkpoint, encode_checkpoint
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.batches import (
    Batch,
    Carriers,
    Entry,
    SourceOffsets,
    decode_batch,
    encode_batch,
    events_partition,
)
from trainmedic.streams.engines.decide_stage import new_events
from trainmedic.streams.engines.ingest_stage import wire_event
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline

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
    from trainmedic.streams.engines.batches import MAX_BATCH_BYTES
    from trainmedic.streams.engines.ingest_stage import _encoded

    big = wire.WorkerFailed(ts=1.0, node="n1", job="j", rank=0, world_size=8, error="x" * 1_000_000)
    entries = [Entry(offset, 1000, b"j", big) for offset in range(10, 30, 2)]  # odd offsets dead-lettered
    pieces = [decode_batch(data) for data in _encoded(("worker", 3), 10, 31, entries)]
    assert len(pieces) > 2 and all(len(encode_batch(p)) <= MAX_BATCH_BYTES for p in pieces)
    assert [(p.first, p.next) for p in pieces][0][0] == 10 and pieces[-1].next == 31
    assert all(a.next == b.first for a, b in zip(pieces, pieces[1:], strict=False))
    assert [e.offset for p in pieces for e in p.entries] == list(range(10, 30, 2))


@pytest.mark.parametrize("name", NAMES)
def test_a_decider_checkpoint_leaves_what_waits_to_the_events_topic_and_resumes_exactly(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decider reading a backlog (as librdkafka hands one over: three batches of 40 events of a
    partition, then the next partition's) holds few (`order_at` 30) and leaves the rest waiting. Its
    checkpoint does not save what waits: each events partition is read again from the first message
    that carried an event waiting, and `SourceOffsets` takes only those from there. The events topic
    has two partitions, and half-way every telemetry partition's batches move to the other (an ingest
    instance that counted them anew). Restored from a checkpoint taken half-way, it applies every
    event once and decides exactly what it decides uninterrupted. (Saved, a backlog's waiting events
    took checkpoints past their limit: a tombstone, and a restart afresh.)"""
    config = LiveConfig(lateness_s=0.5, release_every_s=0.0, max_skew_s=1e10, order_at=30, pause_at=30)
    batches: dict[tuple, list[Batch]] = {}  # per telemetry partition: its batches
    pending: dict[tuple, list[Entry]] = {}
    total: dict[tuple, int] = {}  # per telemetry partition: its end offset
    for _, source, event in arrivals(name):
        offset = total[source] = total.get(source, 0) + 1
        entries = pending.setdefault(source, [])
        entries.append(Entry(offset - 1, int(event.ts * 1000), event.node.encode(), wire_event(event)))
        if len(entries) == 40:
            batches.setdefault(source, []).append(Batch(*source, entries[0].offset, offset, entries))
            del pending[source]
    for source, entries in pending.items():
        batches.setdefault(source, []).append(Batch(*source, entries[0].offset, total[source], entries))
    backlog = []
    while any(batches.values()):
        for source in sorted(batches):
            backlog += batches[source][:3]
            del batches[source][:3]
    topic: list[tuple[tuple[str, int], int, bytes]] = []  # the events topic: where, offset, batch
    ends = {("events", 0): 0, ("events", 1): 0}
    for n, batch in enumerate(backlog):
        where = ("events", (events_partition(batch.source, 2) + (2 * n >= len(backlog))) % 2)
        topic.append((where, ends[where], encode_batch(batch)))
        ends[where] += 1
    applied: list[bytes] = []
    observe_each = Detector.observe_each

    def observing(self, events: list, failed) -> list:
        applied.extend(s.encode(event) for event in events)
        return observe_each(self, events, failed)

    monkeypatch.setattr(Detector, "observe_each", observing)

    def decider(live: LiveDetector, seen: SourceOffsets, carriers: Carriers, start: dict, clock: float,
                then: Callable[[int], bool] = lambda _: False) -> tuple[list, dict, float]:
        """Read the events topic from `start` (per partition) to its end, a message every 10 ms from
        `clock` (wall time), or until `then(messages read)`; as `DeciderService._take` does. What it
        decided, where and when it stopped."""
        pipeline, out, read, wall = Pipeline(s.Topics(), live), [], dict(start), clock
        live.watch_reads()  # as the decider: quiet counts only as far as reads are complete
        live.expect([tp for tp, end in total.items() if seen.next.get(tp, 0) < end], wall)  # _expect_start
        for where, offset, value in topic:
            if offset < read[where]:
                continue
            read[where], wall = offset + 1, wall + 0.01
            batch = decode_batch(value)
            held, dead = new_events(seen, batch, "dlq", wall)
            assert not dead
            if held:
                carriers.carried(batch, where, offset)
                out += pipeline.on_runs([(batch.source, held)], wall)
            live.caught_up(wall)  # all there was is read, as far as the telemetry is concerned
            if then(round((wall - clock) / 0.01)):
                return out, read, wall
        for tick in range(1, 121):  # a minute of silence after the end: lost nodes are decided too
            live.caught_up(wall + tick / 2)
            out += pipeline.on_tick(wall + tick / 2)
        assert not live.buffered
        return out, read, wall

    beginning, clock = dict.fromkeys(ends, 0), 1_800_000_000.0
    whole, waits = LiveDetector(Detector(), config), []  # uninterrupted; what waits after each message
    expected, _, _ = decider(whole, SourceOffsets(), Carriers(), beginning, clock,
                             then=lambda _: waits.append(sum(whole.waiting().values())) and False)
    stop = max(range(len(waits) // 2, len(waits) - 1), key=waits.__getitem__) + 1  # after the move, not last
    once, applied[:] = list(applied), []
    live, seen, carriers = LiveDetector(Detector(), config), SourceOffsets(), Carriers()
    before, read, wall = decider(live, seen, carriers, beginning, clock,
                                 then=lambda messages: messages == stop)
    waiting = sum(live.waiting().values())
    assert read != ends and waiting, "stopped with nothing waiting: the rewind is not exercised"
    offsets = carriers.rewind(read, live.waiting_entries()) | seen.next
    saved = decode_checkpoint(encode_checkpoint(live, offsets, wall, rewind=True))
    assert len(saved.held) == live.buffered - waiting  # what waits is left to the events topic
    resumed = LiveDetector(Detector(), config)
    saved.restore(resumed, wall + 5)  # restarted 5 s later
    again = SourceOffsets({tp: offset for tp, offset in saved.offsets.items() if tp not in ends})
    start = {where: saved.offsets[where] for where in ends}
    after, _, _ = decider(resumed, again, Carriers(), start, wall + 5)
    assert sorted(applied) == sorted(once), "an event lost, or applied twice"
    assert incidents(before + after) == incidents(expected) and incidents(expected)
