"""Ed25519 command signatures: what verifies, what does not, and on which bytes."""

import base64
import json

from trainmedic.recovery.signing import SigningKey, TrustedKeys, Unverified, canonical, generate, parse
from trainmedic.schemas import Command, CommandAction, WorkerSpec, decode, encode
from trainmedic.schemas.topics import adapter

COORDINATOR = generate()
TRUSTED = TrustedKeys.of(COORDINATOR.private.public_key())


def command(**changes: object) -> Command:
    base = dict(ts=100.5, node="n1", id="c1", job="j", generation=2, action=CommandAction.RESTART,
                worker=WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                                  ranks=(0, 1), world_size=2, master_addr="h", master_port=29500,
                                  command=("python", "train.py")))
    return Command(**{**base, **changes})


def wire(event: Command) -> bytes:
    return encode(event)


def test_a_signed_command_verifies_as_sent_and_names_its_key():
    signed = COORDINATOR.sign(command())
    assert signed.key_id == COORDINATOR.key_id and len(base64.b64decode(signed.signature)) == 64
    assert TRUSTED.check(wire(signed)) is None
    assert TRUSTED.check(parse(wire(signed))) is None
    assert decode(wire(signed), adapter("commands")) == signed  # the schema reads it back


def test_every_field_of_the_body_is_covered():
    body = parse(wire(COORDINATOR.sign(command(note="extra fields too"))))
    for field, value in (("generation", 3), ("node", "n2"), ("ts", 101.5), ("action", "stop"),
                         ("note", "changed"), ("worker", {**body["worker"], "command": ["sh", "-c", "x"]})):
        assert "bad signature" in TRUSTED.check({**body, field: value}), field
    assert "bad signature" in TRUSTED.check({**body, "added": 1})


def test_a_re_serialised_command_still_verifies_whatever_its_key_order_and_whitespace():
    body = json.loads(wire(COORDINATOR.sign(command())))
    shuffled = dict(reversed(list(body.items())))
    assert TRUSTED.check(json.dumps(shuffled, indent=3).encode()) is None
    assert TRUSTED.check(json.dumps(body, ensure_ascii=True, separators=(" ,", " : "))) is None


def test_numbers_are_signed_as_their_text():
    body = parse(b'{"b": 1.50, "a": [1e3, -0, 2]}')
    assert canonical(body) == b'{"a":[1e3,-0,2],"b":1.50}'


def test_keys_sort_by_utf16_code_units_and_strings_stay_utf8():
    body = parse('{"\U0001f600": 1, "\uff61": 2, "\u00e9": "\u00e9\\n"}'.encode())
    assert canonical(body) == '{"\u00e9":"\u00e9\\n","\U0001f600":1,"\uff61":2}'.encode()


def test_the_signature_fields_are_not_signed():
    assert canonical({"a": 1, "signature": "s", "key_id": "k"}) == b'{"a":1}'


def test_a_missing_signature_or_key_id_is_unsigned():
    assert TRUSTED.check(wire(command())).startswith("unsigned")
    old_hmac = parse(wire(command(signature="ab" * 32)))
    assert "no key id" in TRUSTED.check(old_hmac)
    assert TRUSTED.check(None).startswith("unsigned")
    assert TRUSTED.check(b"not json").startswith("unsigned")


def test_a_key_nobody_trusts_is_an_unknown_key_id():
    attacker = generate()
    reason = TRUSTED.check(wire(attacker.sign(command())))
    assert f"unknown key id '{attacker.key_id}'" in reason and COORDINATOR.key_id in reason


def test_a_wrong_key_claiming_a_trusted_id_is_a_bad_signature():
    impostor = SigningKey(COORDINATOR.key_id, generate().private)
    assert "bad signature" in TRUSTED.check(wire(impostor.sign(command())))


def test_the_signature_of_another_command_does_not_verify():
    other = COORDINATOR.sign(command(id="c2", node="n9"))
    forged = command().model_copy(update={"signature": other.signature, "key_id": other.key_id})
    assert "bad signature" in TRUSTED.check(wire(forged))
    assert "bad signature" in TRUSTED.check(wire(forged.model_copy(update={"signature": "%%%"})))


def test_after_a_rotation_the_old_key_verifies_while_both_are_trusted():
    old, new = generate(), generate()
    both = TrustedKeys.of(old.private.public_key(), new.private.public_key())
    signed_before = wire(old.sign(command()))
    assert both.check(signed_before) is None
    assert both.check(wire(new.sign(command()))) is None
    assert "unknown key id" in TrustedKeys.of(new.private.public_key()).check(signed_before)


def test_a_signature_counts_only_for_the_deployment_it_names():
    for_a = COORDINATOR.sign(command(deployment="a."))
    assert TRUSTED.check(wire(for_a), deployment="a.") is None
    assert TRUSTED.check(wire(for_a), deployment="b.") == ("other deployment: the command was signed for "
                                                          "deployment 'a.', this is 'b.'")
    unbound = COORDINATOR.sign(command())  # signed before records named their deployment
    assert TRUSTED.check(wire(unbound), deployment="a.") == ("other deployment: the command was signed for "
                                                            "no deployment, this is 'a.'")
    assert TRUSTED.check(wire(unbound)) is None  # a verifier that names none checks none
    relabelled = {**parse(wire(for_a)), "deployment": "b."}  # the field is signed like any other
    assert "bad signature" in TRUSTED.check(relabelled, deployment="b.")
    try:
        TRUSTED.signer(wire(for_a), deployment="b.")
    except Unverified as err:
        assert err.kind == "other_deployment"
    else:
        raise AssertionError("a command of deployment a. verified under b.")
