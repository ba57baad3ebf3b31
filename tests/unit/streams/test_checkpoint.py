"""Checkpoints: state, held events and offsets together, so a restart resumes exactly; older
formats upgraded, newer ones refused."""

from __future__ import annotations

import json

import msgspec
import pytest

import trainmedic.schemas as s
from tests.unit.streams.events import error, hb, start, step
from tests.unit.streams.test_live_detector import source_of
from tests.unit.streams.test_scenarios import load
from trainmedic.bus.message import RawMessage
from trainmedic.schemas.wire import decode_telemetry
from trainmedic.streams.checkpoints.contents import (
    VERSION,
    CheckpointError,
    NewerCheckpoint,
    Owner,
    decode_checkpoint,
    encode_checkpoint,
    foreign,
)
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector

CONFIG = LiveConfig(lateness_s=0.5, release_every_s=0.0)


def arrivals(name: str) -> list[tuple[float, tuple[str, int], s.Event]]:
    """(wall, source, event): the recording in ts order, arriving 0.3 s late, one partition
    (the worker topic) 0.6 s later still, so events wait in the buffer for each other. Each event
    as the engines feed it: decoded from its message by the hot path (schemas/wire.py)."""
    out = []
    for event in sorted(load(name)[0], key=lambda e: e.ts):
        source = source_of(event)
        arrives = event.ts + (0.9 if source[0] == "worker" else 0.3)
        out.append((arrives, source, decode_telemetry(s.encode(event))))
    return sorted(out, key=lambda a: a[0])


def run(live: LiveDetector, items) -> list[tuple]:
    found = []
    for wall, source, event in items:
        origin = RawMessage(*source, 0, int(wall * 1000), getattr(event, "job", event.node).encode(),
                            s.encode(event))
        found += live.feed(event, source, wall, origin=origin)
    return keys(found)


def keys(incidents: list[s.Incident]) -> list[tuple]:
    return [(i.id, i.status, i.category, i.severity, i.node, i.job, i.ts) for i in incidents]


def restored(live: LiveDetector, wall: float, resumed: float | None = None) -> LiveDetector:
    """A detector started afresh (at `resumed`) from `live`'s checkpoint taken at `wall`."""
    saved = decode_checkpoint(encode_checkpoint(live, {("worker", 0): 17}, wall))
    assert saved.offsets == {("worker", 0): 17}
    assert sorted(saved.held, key=lambda h: h.seq) == sorted(live.held(), key=lambda h: h.seq)
    fresh = LiveDetector(Detector(), CONFIG)
    saved.restore(fresh, wall if resumed is None else resumed)
    return fresh


NAMES = ["node_lost_gloo", "gpu_lost_xid79", "hang_rank", "nccl_error_timeout", "storm_invented_jobs"]


def cuts(items: list) -> list[int]:
    return [len(items) // 3, len(items) // 2, 2 * len(items) // 3]


@pytest.mark.parametrize("name", NAMES)
def test_a_detector_restored_from_a_checkpoint_decides_as_if_it_never_stopped(name: str) -> None:
    items = arrivals(name)
    expected = run(LiveDetector(Detector(), CONFIG), items)
    assert expected, "the scenario opens an incident"
    for cut in cuts(items):
        first = LiveDetector(Detector(), CONFIG)
        before = run(first, items[:cut])
        assert first.buffered > 0, "the checkpoint is taken with events held"
        assert before + run(restored(first, items[cut - 1][0]), items[cut:]) == expected


DOWNTIME_S = 60.0  # between the checkpoint and the restart: longer than any idle or lateness setting


@pytest.mark.parametrize("name", NAMES)
def test_a_restored_detector_catches_up_on_a_backlog_read_partition_by_partition(name: str) -> None:
    """After a minute down, the rest arrives at once, a partition at a time (as fetches deliver a
    backlog): the restored detector decides as one that never stopped and got the same backlog
    (the time it was down does not count as quiet)."""
    items = arrivals(name)
    for cut in cuts(items):
        backlog: dict[tuple, list] = {}
        for _, source, event in items[cut:]:
            backlog.setdefault(source, []).append(event)
        chunked = [(source, event) for source, events in sorted(backlog.items()) for event in events]
        going, first = LiveDetector(Detector(), CONFIG), LiveDetector(Detector(), CONFIG)
        run(going, items[:cut])
        run(first, items[:cut])
        saved_at = items[cut - 1][0]
        again = restored(first, saved_at, resumed=saved_at + DOWNTIME_S)
        got = run(again, [(saved_at + DOWNTIME_S + 0.1, source, event) for source, event in chunked])
        assert got == run(going, [(saved_at + 0.1, source, event) for source, event in chunked])
        assert keys(again.tick(saved_at + DOWNTIME_S + 120)) == keys(going.tick(saved_at + 120))


@pytest.mark.parametrize("name", NAMES)
def test_a_restored_detector_notices_the_silence_that_follows(name: str) -> None:
    items = arrivals(name)
    for cut in cuts(items):
        going, first = LiveDetector(Detector(), CONFIG), LiveDetector(Detector(), CONFIG)
        run(going, items[:cut])
        run(first, items[:cut])
        saved_at = items[cut - 1][0]
        again = restored(first, saved_at, resumed=saved_at + DOWNTIME_S)
        for t in range(1, 480):  # two minutes of ticks after the restart, nothing arrives
            assert keys(again.tick(saved_at + DOWNTIME_S + t / 4)) == keys(going.tick(saved_at + t / 4))
        assert again.buffered == going.buffered == 0


def test_held_events_fed_without_an_origin_are_saved_re_encoded() -> None:
    live = LiveDetector(Detector(), CONFIG)
    beat = decode_telemetry(s.encode(s.NodeHeartbeat(ts=5.0, node="n1", interval=1.0)))
    live.feed(beat, ("node", 0), wall=5.0)
    [held] = decode_checkpoint(encode_checkpoint(live, {}, 5.0)).held
    assert (held.event, held.origin) == (beat, None)


def test_events_waiting_are_left_to_kafka_where_their_partition_can_be_read_again() -> None:
    """Past order_at, what arrives ahead of the slowest partition waits unfed: a whole detector's
    checkpoint puts that partition's offset back to the first of them instead of saving them."""
    live = LiveDetector(Detector(), LiveConfig(order_at=2, lateness_s=0.5))
    live.expect([("node", 0), ("node", 1)], 0.0)

    def beat(ts: float, partition: int, offset: int) -> tuple:
        event = decode_telemetry(s.encode(s.NodeHeartbeat(ts=ts, node=f"n{partition}", interval=1.0)))
        return ts, event, RawMessage("node", partition, offset, int(ts * 1000), None, s.encode(event))

    live.feed_many([(("node", 0), [beat(10.0 + k, 0, 100 + k) for k in range(2)])], 0.1)  # held
    live.feed_many([(("node", 0), [beat(12.0 + k, 0, 102 + k) for k in range(4)])], 0.1)  # past order_at
    assert live.waiting() == {("node", 0): 4}  # offsets 102-105 wait for node 1
    offsets = {("node", 0): 106, ("node", 1): 7}
    kept = decode_checkpoint(encode_checkpoint(live, offsets, 0.2, rewind=True))
    assert kept.offsets == {("node", 0): 102, ("node", 1): 7}
    assert [h.origin.offset for h in kept.held] == [100, 101]
    whole = decode_checkpoint(encode_checkpoint(live, offsets, 0.2))
    assert whole.offsets == offsets
    assert [h.origin.offset for h in whole.held] == [100, 101, 102, 103, 104, 105]


def test_a_checkpoint_with_nothing_seen_yet_round_trips() -> None:
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {}, 0.0))
    assert saved.offsets == {} and saved.held == [] and saved.sources == {}
    assert saved.watermark == float("-inf")
    assert saved.state.to_dict() == Detector().state.to_dict()


def test_held_events_keep_where_they_came_from() -> None:
    live = LiveDetector(Detector(), CONFIG)
    raw = b'{"type": "node_heartbeat", "ts": 5, "node": "n1", "interval": 1, "extra": NaN}'
    beat = s.decode(raw, s.adapter("telemetry.node"))
    message = RawMessage("node", 2, 41, 1_700_000_005_000, b"n1", raw)
    live.feed(beat, ("node", 2), wall=5.0, origin=message)
    live.feed(beat, ("node", 2), wall=5.0, origin=RawMessage("node", 2, 42, 1, None, raw))
    live.feed(beat, ("node", 2), wall=5.0, origin=RawMessage("node", 2, 43, 1, b"\xff\x00", raw))
    held = sorted(decode_checkpoint(encode_checkpoint(live, {}, 5.0)).held, key=lambda h: h.seq)
    assert [h.origin for h in held] == [message, RawMessage("node", 2, 42, 1, None, raw),
                                        RawMessage("node", 2, 43, 1, b"\xff\x00", raw)]  # byte for byte
    assert held[0].event.node == "n1" and held[0].seq == 0


def test_a_checkpoint_it_cannot_use_is_refused_with_the_reason() -> None:
    with pytest.raises(CheckpointError, match="not a detector checkpoint"):
        decode_checkpoint(b"garbage")
    with pytest.raises(CheckpointError, match="format None"):
        decode_checkpoint(b'{"x":1}\n')
    with pytest.raises(CheckpointError, match="unreadable: KeyError"):
        decode_checkpoint(b'{"v":1}\n')
    with pytest.raises(CheckpointError, match="format True"):
        decode_checkpoint(b'{"v":true}\n')
    good = encode_checkpoint(LiveDetector(Detector()), {}, 0.0)
    head, _, rest = good.partition(b"\n")
    empty = msgspec.msgpack.encode({"nodes": {}})[1:]  # the state's msgpack, its map header left out
    assert rest.count(empty) == 1
    damaged = rest.replace(empty, msgspec.msgpack.encode({"nodes": []})[1:])
    with pytest.raises(CheckpointError, match="unreadable: AttributeError"):
        decode_checkpoint(head + b"\n" + damaged)  # same length: only the shape of `nodes` is wrong
    with pytest.raises(CheckpointError, match="unreadable: ValueError: 0 held events, the head says 1"):
        decode_checkpoint(good.replace(b'"held":0', b'"held":1'))
    with pytest.raises(CheckpointError, match="format 0; this detector reads 1 to"):
        decode_checkpoint(b'{"v":0}\n')
    with pytest.raises(NewerCheckpoint, match="format 99 was written by a newer trainmedic"):
        decode_checkpoint(b'{"v":99}\n')
    with pytest.raises(NewerCheckpoint, match=f"format {VERSION + 1} was written by a newer"):
        decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {}, 0.0).replace(
            f'"v":{VERSION}'.encode(), f'"v":{VERSION + 1}'.encode(), 1))


# Written by trainmedic's format-1 encoder (before typed origins): node[0] read up to offset 7 and
# node[2] up to 42; one heartbeat applied (n0), two held: n1 as it arrived from node[2]@41 with
# key "n1", and n2 fed without its message (re-encoded).
V1 = (
    b'{"v":1,"offsets":[["node",0,7],["node",2,42]],"watermark":4.5,"sources":[["node",0,2.0,4.0],'
    b'["node",2,5.0,1.0],["node",1,5.0,1.0]],"state":183,"held":[1,"node",2,41,"n1",78,2,null,null,'
    b'null,null,78]}\n{"clock":4.5,"nodes":{"n0":{"last_seen":2.0,"interval":1.0,"lost_since":null,'
    b'"hw_id":null,"jobs":{},"gpus":{},"nics":{}}},"jobs":{},"incidents":{},"sev3_history":{},'
    b'"sev2_history":{}}{"type": "node_heartbeat", "ts": 5, "node": "n1", "interval": 1, "extra": NaN}'
    b'{"v":1,"ts":5.0,"node":"n2","type":"node_heartbeat","interval":1.0,"links":[]}'
)


def test_a_format_1_checkpoint_is_upgraded_when_read() -> None:
    saved = decode_checkpoint(V1)
    assert saved.offsets == {("node", 0): 7, ("node", 2): 42}
    assert saved.watermark == 4.5 and saved.state.clock == 4.5 and set(saved.state.nodes) == {"n0"}
    assert saved.sources == {("node", 0): (2.0, 4.0), ("node", 2): (5.0, 1.0), ("node", 1): (5.0, 1.0)}
    first, second = sorted(saved.held, key=lambda h: h.seq)
    raw = b'{"type": "node_heartbeat", "ts": 5, "node": "n1", "interval": 1, "extra": NaN}'
    assert first.origin == RawMessage("node", 2, 41, -1, b"n1", raw)  # no timestamp in 1
    assert first.event.node == "n1"
    assert second.origin is None and second.event.node == "n2"  # seq 1 and 2 then: their order kept


def test_a_format_1_checkpoint_restores_a_detector_that_decides_on() -> None:
    """Restored from format 1, then saved in the current format and read back: the same detector."""
    live = LiveDetector(Detector(), CONFIG)
    decode_checkpoint(V1).restore(live, wall=6.0)
    again = decode_checkpoint(encode_checkpoint(live, {("node", 2): 42}, 6.0))
    assert again.state.to_dict() == decode_checkpoint(V1).state.to_dict()
    def in_order(held: list) -> list:  # seq orders held events; its values are renumbered when saved
        return [h.origin for h in sorted(held, key=lambda h: (h.event.ts, h.seq))]

    assert in_order(again.held) == in_order(decode_checkpoint(V1).held)
    live.tick(6.0 + 5.0)  # every partition quiet: the held heartbeats are applied
    assert set(live.detector.state.nodes) == {"n0", "n1", "n2"} and live.buffered == 0


# Written by trainmedic's format-4 encoder: gpu[0] read up to 6, node[0] to 7, node[2] to 42; one GPU
# sample applied (n0's GPU 3), four heartbeats held: n0 from node[0]@6, n3 from the ingest stage
# (node[1]@3, no key, its value not kept), n1 from node[2]@41, n2 fed without its message.
V4 = (
    b'{"v":4,"owner":{"prefix":"","topics":["gpu","node"]},"offsets":[["gpu",0,6],["node",0,7],["node",2,42]'
    b'],"watermark":1.0,"sources":[["gpu",0,1.0,1.0],["node",0,2.0,1.0],["node",2,5.0,0.5],["node",1,5.0,'
    b'0.40000000000000036]],"state":367,"held":[0,"node",0,6,2000,2,94,1,"node",1,3,4900,-1,94,2,"node",2,'
    b'41,5000,2,94,3,null,null,null,null,-1,94]}\n{"clock":1.0,"nodes":{"n0":{"last_seen":1.0,"interval":'
    b'null,"lost_since":null,"hw_id":null,"gap_id":null,"gap_until":null,"leaving":false,"jobs":{},"gpus":'
    b'{"3":{"last_ts":1.0,"ecc_dbe":0,"nvlink_errors":null,"hot_since":null,"cool_since":null,"thermal_id":'
    b'null,"silent":false}},"nics":{}}},"jobs":{},"incidents":{},"sev3_history":{},"sev2_history":{},'
    b'"job_errors":{}}n0{"v":1,"ts":2.0,"node":"n0","type":"node_heartbeat","interval":1.0,"links":[],'
    b'"leaving":false}{"v":1,"ts":4.9,"node":"n3","type":"node_heartbeat","interval":1.0,"links":[],'
    b'"leaving":false}n1{"v":1,"ts":5.0,"node":"n1","type":"node_heartbeat","interval":1.0,"links":[],'
    b'"leaving":false}{"v":1,"ts":5.0,"node":"n2","type":"node_heartbeat","interval":1.0,"links":[],'
    b'"leaving":false}'
)


def test_a_format_4_checkpoint_is_upgraded_when_read_and_saves_again_as_it_was() -> None:
    saved = decode_checkpoint(V4)
    assert saved.owner == Owner("", ("gpu", "node"))
    assert saved.offsets == {("gpu", 0): 6, ("node", 0): 7, ("node", 2): 42} and saved.watermark == 1.0
    assert saved.state.nodes["n0"].gpus[3].ecc_dbe == 0 and saved.state.clock == 1.0
    assert [(h.event.node, h.origin and (h.origin.topic, h.origin.partition, h.origin.offset, h.origin.key))
            for h in sorted(saved.held, key=lambda h: h.seq)] == [
        ("n0", ("node", 0, 6, b"n0")), ("n3", ("node", 1, 3, None)), ("n1", ("node", 2, 41, b"n1")),
        ("n2", None)]
    live = LiveDetector(Detector(), CONFIG)
    saved.restore(live, wall=12.0)
    again = decode_checkpoint(encode_checkpoint(live, saved.offsets, 12.0, saved.owner))
    assert again.state.to_dict() == saved.state.to_dict() and again.watermark == saved.watermark
    assert [(h.event, h.origin) for h in again.held] == [(h.event, h.origin) for h in saved.held]


def test_a_format_4_checkpoints_held_events_of_equal_ts_keep_their_seq_order() -> None:
    """Format 4 listed held events in heap order, not by seq: upgraded, equal times keep seq order."""
    head, _, body = V4.partition(b"\n")
    meta = json.loads(head)
    at = meta["state"]
    flat, values = meta["held"], []
    for i in range(0, len(flat), 7):  # each held event's key and value, as listed
        key_length, length = flat[i + 5], flat[i + 6]
        values.append(body[at:at + max(key_length, 0) + length])
        at += max(key_length, 0) + length
    order = [3, 1, 0, 2]  # n2 (seq 3) listed before n1 (seq 2); both at ts 5.0
    meta["held"] = [x for i in order for x in flat[7 * i:7 * i + 7]]
    shuffled = json.dumps(meta, separators=(",", ":")).encode() + b"\n" + body[:meta["state"]]
    shuffled += b"".join(values[i] for i in order)
    saved = decode_checkpoint(shuffled)
    in_release_order = sorted(saved.held, key=lambda h: (h.event.ts, h.seq))  # as `resume` takes them
    assert [h.event.node for h in in_release_order] == ["n0", "n3", "n1", "n2"]


def test_a_checkpoint_names_its_owner_and_another_deployments_is_foreign() -> None:
    ours, theirs = Owner("a.", ("a.gpu", "a.node", "a.worker")), Owner("b.", ("b.gpu", "b.node", "b.worker"))
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {("a.node", 0): 3}, 1.0, ours))
    assert saved.owner == ours
    assert foreign(saved, ours) is None
    assert "'a.'" in foreign(saved, theirs)
    unnamed = decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {("a.node", 0): 3}, 1.0))
    assert unnamed.owner is None  # as format 1 wrote them: judged by the topics it read
    assert foreign(unnamed, ours) is None
    assert foreign(unnamed, theirs) == "it read topics a.node"


# Written by trainmedic's format-2 encoder (before escalation kept job signatures): job j's rank 0
# on n0 raised at 3.0 (its group pending until 4.0); n0 had a SEV2 at 0.5.
V2 = (
    b'{"v":2,"owner":null,"offsets":[["worker",0,4]],"watermark":null,"sources":[],"state":699,"held":[]}\n'
    b'{"clock":3.0,"nodes":{"n0":{"last_seen":3.0,"interval":1.0,"lost_since":null,"hw_id":null,'
    b'"gap_id":null,"gap_until":null,"jobs":{"j":[0]},"gpus":{},"nics":{}}},"jobs":{"j":{"gen":0,'
    b'"last_progress":2.0,"ranks":{"0":{"node":"n0","step":0,"step_ts":2.0,"errored":true,"times":[1.0],'
    b'"slow_checks":0,"straggler_id":null}},"max_step":0,"steps_seen":1,"step_times":[],"threshold":600.0,'
    b'"finishing":false,"fatal_id":null,"open_ids":[],"group":{"first_ts":3.0,"release":4.0,"best":[6,3.0,'
    b'0,"n0","software_error","3.000 rank 0 on n0: ValueError: bad"],"ranks":[0],"lines":["3.000 rank 0 '
    b'on n0: ValueError: bad"],"dropped":0},"straggler_due":12.0}},"incidents":{},"sev3_history":{},'
    b'"sev2_history":{"n0":[0.5]}}'
)


def test_a_format_2_checkpoint_is_upgraded_with_empty_job_signatures() -> None:
    saved = decode_checkpoint(V2)
    assert saved.offsets == {("worker", 0): 4} and saved.state.clock == 3.0
    assert saved.state.job_errors == {} and saved.state.sev2_history == {"n0": [0.5]}
    assert saved.state.jobs["j"].group.best.signature == ""  # not known: never a repeat
    det = Detector(state=saved.state)
    (opened,) = det.observe(s.NodeHeartbeat(ts=4.5, node="n0", interval=1.0))
    assert (opened.category, opened.severity.value) == ("software_error", "SEV1")  # as format 2 said
    assert det.state.job_errors == {}
    again = decode_checkpoint(encode_checkpoint(LiveDetector(det), saved.offsets, 4.0))
    assert again.state.to_dict() == det.state.to_dict()


def test_job_signatures_survive_a_checkpoint_so_a_restored_detector_still_blames_the_job() -> None:
    """Generation 0 fails before the checkpoint, generation 1 the same way after the restore:
    without the saved signatures the second would be the node's SEV1."""
    det = Detector()
    for ev in [hb(1.0), start(1.0, 0), hb(2.0), step(2.0, 0, 0), hb(3.0), error(3.0, 0, "ValueError: bad 1"),
               hb(4.0), hb(4.5)]:
        det.observe(ev)
    assert det.state.job_errors == {"j": [[4.0, "n0", "software_error: ValueError: bad #"]]}
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(det), {}, 5.0))
    assert saved.state.to_dict() == det.state.to_dict()
    restored, out = Detector(state=saved.state), []
    for ev in [hb(5.0), hb(6.0), start(6.0, 0, gen=1), hb(7.0), step(7.0, 0, 0, gen=1), hb(8.0),
               error(8.0, 0, "ValueError: bad 2", gen=1), hb(9.0), hb(9.5)]:
        out += restored.observe(ev)
    opened = [(i.category, i.severity.value) for i in out if i.status.value == "open"]
    assert opened == [("software_error", "SEV2")]


def test_a_jobs_own_hang_floor_survives_a_checkpoint_and_a_format_3_one_loads_without_it() -> None:
    det = Detector()
    for ev in [hb(1.0), start(1.0, 0, hang_floor_s=90.0), step(2.0, 0, 0)]:
        det.observe(ev)
    data = encode_checkpoint(LiveDetector(det), {}, 3.0)
    saved = decode_checkpoint(data)
    assert saved.state.jobs["j"].hang_floor_s == 90.0 and saved.state.to_dict() == det.state.to_dict()
    # the same detector as format 3 wrote it (state as JSON, nothing held): no hang_floor_s in a job
    old = json.dumps(det.state.to_dict(), separators=(",", ":")).encode()
    old = old.replace(b',"hang_floor_s":90.0', b"")
    old_head = (b'{"v":3,"offsets":[],"watermark":null,"sources":[],"state":%d,"held":[]}' % len(old))
    upgraded = decode_checkpoint(old_head + b"\n" + old)
    assert upgraded.state.jobs["j"].hang_floor_s is None  # the config's floor, as format 3 meant


def test_the_limits_storms_survive_a_checkpoint_and_a_format_7_one_loads_without_them() -> None:
    """Format 8 keeps the rate limits' counts, the open storms and which incidents they suppressed
    (streams/core/limits.py); a format-7 checkpoint, which has none of them, counts nothing."""
    from tests.unit.streams.test_storms import alive, forgery

    det = Detector()
    for ev in sorted(alive(20.0) + forgery(jobs=30), key=lambda e: e.ts):
        det.observe(ev)
    assert det.state.storms and any(rec.suppressed for rec in det.state.incidents.values())
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(det), {}, 20.0))
    assert saved.state.to_dict() == det.state.to_dict()
    # the same state as format 7 wrote it: no rates, no storms, no incident suppressed
    plain = det.state.to_dict()
    plain = {k: v for k, v in plain.items() if k not in ("rates", "storms")}
    plain["incidents"] = {k: {f: x for f, x in v.items() if f != "suppressed"}
                          for k, v in plain["incidents"].items()}
    old = msgspec.msgpack.encode(plain)
    old_head = b'{"v":7,"offsets":[],"watermark":null,"sources":[],"state":%d,"held":0}' % len(old)
    upgraded = decode_checkpoint(old_head + b"\n" + old + msgspec.msgpack.encode([]))
    assert upgraded.state.rates == {} and upgraded.state.storms == {}
    assert not any(rec.suppressed for rec in upgraded.state.incidents.values())
