"""A job's generation comes from the coordinator's own commands, never from a worker_start alone (issue 45,
Deliver 2): with the coordinator's keys, the detector moves or creates a job only on an event whose
`placement` is the coordinator-signed placement of a start or restart there (streams/core/placement.py,
streams/placements.py), and uses a job's other reports only about a rank placed on the node that sends
them."""

from __future__ import annotations

import logging
import time

import msgspec
import pytest

import trainmedic.schemas as s
from tests.unit.streams.events import WORLD, error, exited, hb, node_of, start, step
from trainmedic.bus.message import RawMessage
from trainmedic.recovery import keyring
from trainmedic.recovery.key_folders import KeyFolder
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas.commands import Placement
from trainmedic.streams.checkpoints.contents import decode_checkpoint, encode_checkpoint
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline
from trainmedic.streams.placements import FAILED_WINDOW_S, MAX_FAILED, PlacementCheck, placements_of

PREFIX = "mem."
GEN = 5


@pytest.fixture
def keys(tmp_path):
    """A keys folder with a coordinator key: (its signing key, the detector's check)."""
    keyring.generate_key(tmp_path, time.time())
    return keyring.load_signing(tmp_path), placements_of(tmp_path, PREFIX, logging.getLogger("test"))


def placement(signer, node: str, job: str = "j", gen: int = GEN, ranks=None, deployment: str = PREFIX) -> str:
    """The signed placement of `ranks` (default: the node's two) of `job` on `node`, as JSON."""
    ranks = tuple(r for r in range(WORLD) if node_of(r) == node) if ranks is None else ranks
    signed = signer.sign(Placement(job=job, generation=gen, node=node, ranks=ranks, deployment=deployment))
    return s.encode(signed).decode()


def running(signer, placed, t0: float = 0.0, gen: int = GEN, job: str = "j") -> Detector:
    """A detector following job `job` at `gen`, every rank started with its placement, stepping."""
    det = Detector(placed=placed)
    for r in range(WORLD):
        placed_here = placement(signer, node_of(r), job, gen)
        det.observe(start(t0 + 0.01 * r, r, job=job, gen=gen, placement=placed_here))
    for t in range(1, 4):
        for r in range(WORLD):
            det.observe(step(t0 + t + 0.001 * r, r, t, job=job, gen=gen))
    return det


def test_a_forged_start_far_ahead_does_not_blind_the_detector_to_a_real_sigkill(keys) -> None:
    signer, placed = keys
    det = running(signer, placed)
    det.observe(start(4.0, 3, gen=GEN + 16, node="n9"))  # another node, no placement: the red team's forgery
    assert det.state.jobs["j"].gen == GEN
    refused = det.take_refused()
    assert [reason for _, reason in refused] == [
        f"unplaced: node n9 holds no placement of rank 3 of job j generation {GEN + 16} (it carries none)"]
    assert det.limited.unplaced == 1
    det.observe(exited(5.0, 1, code=None, signal=9, gen=GEN))
    opened = [i for i in det.advance(30.0) + det.drain() if i.status == "open"]
    assert [(i.category, i.node) for i in opened] == [("process_exit", "n0")]


def test_a_forged_error_of_a_real_rank_neither_moves_it_nor_opens_an_incident(keys) -> None:
    signer, placed = keys
    det = running(signer, placed)
    for ev in (error(4.0, 1, "RuntimeError: CUDA error: an illegal memory access", gen=GEN, node="n9"),
               exited(4.1, 1, code=1, gen=GEN, node="n9")):
        assert det.observe(ev) == []
    assert det.state.jobs["j"].ranks[1].node == "n0"
    assert "n9" not in det.state.nodes or "j" not in det.state.nodes["n9"].jobs
    assert len(det.take_refused()) == 2
    assert det.advance(4.5) == [] and det.drain() == []
    assert det.state.jobs["j"].group is None


@pytest.mark.parametrize("other", [
    {"node": "n1"},  # placed on another node
    {"job": "k"},  # another job
    {"gen": GEN + 1},  # another generation
    {"ranks": (6,)},  # the node, but not this rank
    {"deployment": "other."},  # signed for another deployment
])
def test_a_valid_placement_of_something_else_is_refused(keys, other) -> None:
    signer, placed = keys
    det = running(signer, placed)
    fields = {"node": "n0", "job": "j", "gen": GEN + 2, "ranks": (0, 1), **other}
    det.observe(start(4.0, 0, gen=GEN + 2, node="n0", placement=placement(signer, **fields)))
    assert det.state.jobs["j"].gen == GEN
    (_, reason), = det.take_refused()
    assert reason.startswith(f"unplaced: node n0 holds no placement of rank 0 of job j generation {GEN + 2} "
                             "(its placement")


def test_a_placement_signed_by_another_key_is_refused(keys, tmp_path_factory) -> None:
    signer, placed = keys
    other = tmp_path_factory.mktemp("other")
    keyring.generate_key(other, time.time())
    det = running(signer, placed)
    forged = placement(keyring.load_signing(other), "n0", gen=GEN + 1)
    det.observe(start(4.0, 0, gen=GEN + 1, placement=forged))
    assert det.state.jobs["j"].gen == GEN
    (_, reason), = det.take_refused()
    assert "none a trusted coordinator key signed" in reason


def test_a_valid_placement_moves_the_generation_and_places_only_its_nodes_ranks(keys) -> None:
    signer, placed = keys
    det = running(signer, placed)
    assert det.state.jobs["j"].placed == {f"n{n}": frozenset({2 * n, 2 * n + 1}) for n in range(4)}
    new = GEN + 1
    det.observe(start(4.0, 0, gen=new, placement=placement(signer, "n0", gen=new)))
    job = det.state.jobs["j"]
    assert (job.gen, job.placed) == (new, {"n0": frozenset({0, 1})})
    det.observe(step(4.5, 2, 0, gen=new))  # n1 has not shown its placement of the new generation yet
    assert 2 not in job.ranks and len(det.take_refused()) == 1
    det.observe(start(4.6, 2, gen=new, placement=placement(signer, "n1", gen=new)))
    det.observe(step(4.7, 2, 0, gen=new))
    assert set(job.placed) == {"n0", "n1"} and job.ranks[2].step == 0 and det.take_refused() == []


def test_a_placed_node_speaks_only_for_its_own_ranks(keys) -> None:
    """n0 is placed for ranks 0 and 1: its forged error of rank 2 (n1's) is refused, not re-placed."""
    signer, placed = keys
    det = running(signer, placed)
    det.observe(error(4.0, 2, "RuntimeError: CUDA error: an illegal memory access", gen=GEN, node="n0"))
    assert det.state.jobs["j"].ranks[2].node == "n1" and len(det.take_refused()) == 1
    assert det.advance(4.5) == [] and det.drain() == []


def test_an_exit_carrying_its_placement_announces_the_generation(keys) -> None:
    """A rank that dies before its hook starts is seen: its executor's worker_exit carries the placement."""
    signer, placed = keys
    det = running(signer, placed)
    new = GEN + 1
    det.observe(exited(4.0, 0, code=1, gen=new, placement=placement(signer, "n0", gen=new)))
    assert det.state.jobs["j"].gen == new and det.take_refused() == []
    opened = [i for i in det.advance(30.0) + det.drain() if i.status == "open"]
    assert [(i.category, i.node) for i in opened] == [("process_exit", "n0")]


def test_reports_of_a_job_never_placed_create_nothing(keys) -> None:
    """Invented jobs (the red team's 200 SEV1 hangs) are not followed; an honest step of a job the detector
    never saw start (started without its checkpoint) is counted, not dead-lettered."""
    _, placed = keys
    det = Detector(placed=placed)
    det.observe(hb(0.5, "n9"))
    det.observe(start(1.0, 0, job="invented", node="n9"))
    det.observe(step(1.1, 0, 1, job="invented", node="n9"))
    assert det.state.jobs == {} and det.limited.unplaced == 2
    assert [reason for _, reason in det.take_refused()] == [
        "unplaced: node n9 holds no placement of rank 0 of job invented generation 0 (it carries none)"]
    assert [i for i in det.advance(1000.0) if i.category == "hang"] == []


def test_a_job_followed_before_placements_were_known_is_trusted_until_its_next_generation(keys) -> None:
    signer, placed = keys
    old = Detector()  # no keys: as before this check, or a format-8 checkpoint
    for r in range(WORLD):
        old.observe(start(0.01 * r, r, gen=GEN))
    assert old.state.jobs["j"].placed is None
    det = Detector(old.config, old.state, placed)
    det.observe(step(1.0, 1, 0, gen=GEN, node="n0"))
    assert det.state.jobs["j"].ranks[1].step == 0
    det.observe(start(2.0, 1, gen=GEN + 1))  # a move still needs its placement
    assert det.state.jobs["j"].gen == GEN and len(det.take_refused()) == 1


def test_without_the_coordinators_keys_generations_come_from_worker_start_as_before(tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        assert placements_of(tmp_path, PREFIX, logging.getLogger("test")) is None
    assert "INSECURE: no coordinator public key" in caplog.text
    det = Detector()
    for r in range(WORLD):
        det.observe(start(0.01 * r, r, gen=GEN))
    det.observe(start(4.0, 3, gen=GEN + 16, node="n9"))
    assert det.state.jobs["j"].gen == GEN + 16 and det.take_refused() == []


def test_one_placement_is_verified_once_for_all_its_ranks_and_its_signature_speaks_only_for_it(keys) -> None:
    signer, placed = keys
    raw = placement(signer, "n0")
    verified = placed(raw, "n0")
    assert (verified.node, verified.job, verified.generation) == ("n0", "j", GEN)
    assert placed(raw, "n0") is verified  # from the cache
    forged = raw.replace('"generation":5', '"generation":21')  # the same signature over another body
    assert forged != raw and placed(forged, "n0").generation == GEN


def test_the_placed_nodes_survive_a_checkpoint_and_a_format_8_one_loads_them_unknown(keys) -> None:
    signer, placed = keys
    det = running(signer, placed)
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(det), {}, 20.0))
    assert saved.state.jobs["j"].placed == det.state.jobs["j"].placed and len(det.state.jobs["j"].placed) == 4
    live = LiveDetector(Detector(placed=placed))
    saved.restore(live, 20.0)
    assert live.detector.placed is placed
    plain = det.state.to_dict()
    for job in plain["jobs"].values():
        del job["placed"]
    old = msgspec.msgpack.encode(plain)
    head = b'{"v":8,"offsets":[],"watermark":null,"sources":[],"state":%d,"held":0}' % len(old)
    assert decode_checkpoint(head + b"\n" + old + msgspec.msgpack.encode([])).state.jobs["j"].placed is None


def test_the_pipeline_dead_letters_an_unplaced_report_with_the_reason(keys) -> None:
    signer, placed = keys
    topics = s.Topics(PREFIX)
    run = Pipeline(topics, LiveDetector(running(signer, placed), LiveConfig(lateness_s=0.0)))
    forged = s.encode(start(4.0, 3, gen=GEN + 16, node="n9"))
    out = run.on_message(RawMessage(topics.worker, 2, 7, -1, b"j", forged), wall=4.0)
    out += run.on_tick(wall=10.0)
    letters = [s.decode(o.value, s.adapter("dlq")) for o in out if o.topic == topics.dlq]
    assert [(letter.partition, letter.offset, letter.reason) for letter in letters] == [
        (2, 7, f"unplaced: node n9 holds no placement of rank 3 of job j generation {GEN + 16} "
               "(it carries none)")]
    assert run.stats.dead_lettered == 1


def test_a_revoked_coordinator_key_stops_counting_within_a_second_cache_or_not(tmp_path) -> None:
    keyring.generate_key(tmp_path, time.time())
    old = keyring.load_signing(tmp_path)
    now = [0.0]
    check = PlacementCheck(KeyFolder(tmp_path, keyring.coordinator_keys(tmp_path), keyring.coordinator_keys),
                           PREFIX, clock=lambda: now[0])
    raw = placement(old, "n0")
    assert check(raw, "n0") is not None
    keyring.rotate_key(tmp_path, time.time())
    keyring.revoke_key(tmp_path, old.key_id, time.time())
    now[0] = 1.5
    assert check(raw, "n0") is None  # cached before: the revocation still counts


def test_a_node_whose_placements_keep_failing_is_not_verified_again_for_a_while(
        tmp_path, tmp_path_factory, monkeypatch) -> None:
    keyring.generate_key(tmp_path, time.time())
    other = tmp_path_factory.mktemp("other")
    keyring.generate_key(other, time.time())
    now = [0.0]
    check = PlacementCheck(KeyFolder(tmp_path, keyring.coordinator_keys(tmp_path), keyring.coordinator_keys),
                           PREFIX, clock=lambda: now[0])
    verified = []
    real = TrustedKeys.signer
    monkeypatch.setattr(TrustedKeys, "signer", lambda self, *a: verified.append(1) or real(self, *a))
    forged = [placement(keyring.load_signing(other), "n9", gen=g) for g in range(MAX_FAILED + 10)]
    assert [check(raw, "n9") for raw in forged] == [None] * len(forged)
    assert len(verified) == MAX_FAILED  # the rest refused unchecked
    good = placement(keyring.load_signing(tmp_path), "n1")
    assert check(good, "n1") is not None  # another node's are checked as ever
    now[0] = FAILED_WINDOW_S
    check(forged[0], "n9")
    assert len(verified) == MAX_FAILED + 2  # n1's, then n9's again in a new window


def test_a_signed_placement_moves_a_job_past_the_generation_cap(keys) -> None:
    """A node replays its own old placement to a detector started without its checkpoint: the job is
    followed at that old generation, but the real generation's signed exit still moves it there (no
    GENERATION_JUMP cap on a verified placement), and the real failure is seen."""
    signer, placed = keys
    det = Detector(placed=placed)
    det.observe(start(1.0, 0, gen=3, placement=placement(signer, "n0", gen=3)))
    real = 3 + 30
    det.observe(exited(2.0, 0, code=None, signal=9, gen=real, placement=placement(signer, "n0", gen=real)))
    assert det.state.jobs["j"].gen == real and det.take_refused() == []
    opened = [i for i in det.advance(30.0) + det.drain() if i.status == "open"]
    assert [(i.category, i.node) for i in opened] == [("process_exit", "n0")]
