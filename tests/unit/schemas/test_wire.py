"""The hot path's decoder (schemas/wire.py) against the contract's: whatever it accepts, the
pydantic models accept with the same values; what it refuses, the contract decides; and the
detection core decides the same incidents from either kind of event."""

from __future__ import annotations

import json
import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.streams.test_scenarios import NAMES, SCENARIOS, load
from trainmedic.schemas import encode, wire
from trainmedic.schemas.codec import TELEMETRY, InvalidEvent
from trainmedic.schemas.wire import KINDS, decode_telemetry, retimed
from trainmedic.streams.replay import replay

TEMPLATES = [json.loads(line) for name in NAMES
             for line in (SCENARIOS / f"{name}.jsonl").read_text().splitlines()[:40] if line.strip()]
FIELDS = {kind.__struct_config__.tag: kind.__struct_fields__ for kind in KINDS}

values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1.0, 2.5, 1e300, -1e-300, "1", "1.5", "true", "", "n1", "n1\n", "a\x00b", "ü"]),
    st.text(max_size=12), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.lists(st.fixed_dictionaries({"name": st.sampled_from(["eth0", "", "e\n"]),
                                    "up": st.sampled_from([True, 1, "x"])}), max_size=2),
)


def mutated(rng: random.Random, pool: list) -> bytes:
    """A template event with one to three fields replaced, removed or added."""
    event = dict(rng.choice(TEMPLATES))
    fields = [*event, *FIELDS[event["type"]], "extra"]
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(fields)
        if rng.random() < 0.15:
            event.pop(field, None)
        else:
            event[field] = rng.choice(pool)
    return json.dumps(event, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")


def contract(raw: bytes):
    try:
        return TELEMETRY.validate_json(raw)
    except Exception:  # the contract refuses it
        return None


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), pool=st.lists(values, min_size=3, max_size=10))
def test_what_the_fast_path_accepts_the_contract_accepts_with_the_same_values(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        raw = mutated(rng, pool)
        model = contract(raw)
        try:
            event = decode_telemetry(raw)
        except InvalidEvent:
            assert model is None, raw
            continue
        assert model is not None, raw
        if isinstance(event, msgspec.Struct):
            got = json.loads(encode(event))
            assert got == {k: v for k, v in json.loads(model.model_dump_json()).items() if k in got}, raw
        else:
            assert event == model


def test_lax_values_and_odd_bytes_are_the_contracts_to_decide() -> None:
    good = {"ts": 5, "type": "worker_step", "node": "n1", "job": "j", "rank": 1, "world_size": 8, "step": 3,
            "step_time": 0.5}
    fast = decode_telemetry(json.dumps(good).encode())
    assert isinstance(fast, msgspec.Struct) and (fast.rank, fast.generation, fast.pid) == (1, 0, None)
    for lax in ({"rank": 1.0}, {"rank": "1"}, {"extra": float("nan")}, {"job": "jü"}):
        event = decode_telemetry(json.dumps({**good, **lax}, ensure_ascii=False).encode())
        assert not isinstance(event, msgspec.Struct) and event.rank == 1  # pydantic's lax mode took it
    for bad in ({"node": "n1\n"}, {"job": "a\x00b"}, {"rank": -1}, {"type": "worker_nap"}):
        with pytest.raises(InvalidEvent) as refused:
            decode_telemetry(json.dumps({**good, **bad}).encode())
        with pytest.raises(Exception) as contract_refused:
            TELEMETRY.validate_json(json.dumps({**good, **bad}))
        assert str(refused.value).split(":")[0] in str(contract_refused.value)
    for unknown in (b"[" * 300 + b"]" * 300, b"1" * 5000):  # within msgspec's limits, past the contract's
        with pytest.raises(InvalidEvent):
            decode_telemetry(json.dumps(good).encode()[:-1] + b', "extra": ' + unknown + b"}")
    extra = decode_telemetry(json.dumps({**good, "extra": [1]}).encode())
    assert not isinstance(extra, msgspec.Struct) and extra.model_extra == {"extra": [1]}
    for raw in (b'{"ts": 5, "type": "worker_step", "no\xffde": 1}', b"[" * 3000 + b"]" * 3000, None):
        with pytest.raises(InvalidEvent):
            decode_telemetry(raw)


def test_a_step_that_says_where_its_state_came_from_decodes_as_its_model() -> None:
    step = {"ts": 5, "type": "worker_step", "node": "n1", "job": "j", "rank": 1, "world_size": 8, "step": 3,
            "step_time": 0.5, "restored": {"kind": "replica", "step": 2, "seconds": 0.25, "read": 7}}
    fast = decode_telemetry(json.dumps(step).encode())
    assert isinstance(fast, msgspec.Struct) and (fast.restored.read, fast.restored.received) == (7, None)
    assert contract(encode(fast)) == TELEMETRY.validate_json(json.dumps(step))
    extra = decode_telemetry(json.dumps({**step, "restored": {**step["restored"], "extra": 1}}).encode())
    assert not isinstance(extra, msgspec.Struct) and extra.restored.read == 7  # the contract's to decide
    for bad in ({"kind": "disk"}, {"read": -1}):
        raw = json.dumps({**step, "restored": {**step["restored"], **bad}})
        with pytest.raises(InvalidEvent):
            decode_telemetry(raw.encode())
        with pytest.raises(Exception):  # noqa: B017 - the contract refuses it too, whatever its error type
            TELEMETRY.validate_json(raw)


def test_a_fast_event_encodes_and_retimes_as_its_model_does() -> None:
    for template in TEMPLATES[:200]:
        raw = json.dumps(template).encode()
        fast, model = decode_telemetry(raw), TELEMETRY.validate_json(raw)
        assert contract(encode(fast)) == contract(encode(model))
        assert contract(encode(retimed(fast, 7.0))) == model.model_copy(update={"ts": 7.0})


@pytest.mark.parametrize("name", NAMES)
def test_the_core_decides_the_same_incidents_from_either_kind(name: str) -> None:
    models = load(name)[0]
    fast = [decode_telemetry(encode(event)) for event in models]
    assert all(isinstance(event, msgspec.Struct) for event in fast)
    assert replay(fast, tail_s=60.0) == replay(models, tail_s=60.0)


def test_each_kind_has_a_trusted_twin_with_its_fields_and_no_bounds() -> None:
    """What the ingest stage validated is read back by the decider unchecked (streams/engines/batches.py):
    the same fields and defaults, a subclass, and a value out of the contract's bounds decodes."""
    for kind, twin in wire.TRUSTED.items():
        assert issubclass(twin, kind)
        assert [(f.name, f.default) for f in msgspec.structs.fields(twin)] == [
            (f.name, f.default) for f in msgspec.structs.fields(kind)]
    raw = (b'{"type":"node_heartbeat","ts":-5.0,"node":"no spaces allowed","interval":1.0,'
           b'"links":[{"name":"x y","up":true}]}')
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(raw, type=wire.Telemetry)
    beat = msgspec.json.decode(raw, type=wire.TrustedTelemetry)
    assert type(beat) is wire.TRUSTED[wire.NodeHeartbeat] and beat.ts == -5.0
    assert type(beat.links[0]) is wire.TRUSTED[wire.LinkState]
