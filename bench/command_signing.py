"""Signing and verifying one record: Ed25519 over canonical JSON (now) beside HMAC-SHA256 (before).

Each command round signs a fresh `start` command as the coordinator does (`SigningKey.sign`:
encode, canonicalise, sign) and verifies the bytes as an executor does (`TrustedKeys.check` on
the received JSON, with two trusted keys as during a rotation). The HMAC column is the scheme
it replaced (HMAC-SHA256 over the model's sorted, compact JSON), timed the same way. The ack
round signs an ack as an executor does (its node's key) and checks it as the coordinator does
(`provenance.unverified`: decode, verify with the node keys of a 1,024-node cluster, the key's
node is the ack's); the job round the same for a job submission and the operator key. Target:
sign + verify under 1 ms per record. No broker needed.

    .venv/bin/python bench/command_signing.py [--commands 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import statistics
import time
from collections.abc import Callable

from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.provenance import Trust, unverified
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import (
    Command,
    CommandAcked,
    CommandAction,
    JobSpec,
    JobSubmitted,
    WorkerSpec,
    decode,
    encode,
)
from trainmedic.schemas.topics import adapter

CLUSTER = 1024  # nodes, each with its own ack key the coordinator trusts


def command(i: int) -> Command:
    worker = WorkerSpec(ranks=tuple(range(8)), world_size=64, master_addr="10.0.0.1", master_port=29500,
                        command=("python", "-m", "train", "--config", "llm.yaml"), checkpoint_dir="/ckpt/llm")
    return Command(ts=time.time(), node=f"n{i % 8:02d}", id=f"cmd-{i:08d}", plan_id="plan-1", job="llm",
                   generation=3, action=CommandAction.START, worker=worker)


def hmac_round(key: bytes) -> Callable[[Command], None]:
    """The replaced scheme: HMAC over the model's canonical dump, on both sides."""
    validator = adapter("commands")

    def digest(c: Command) -> str:
        body = c.model_dump(mode="json", exclude={"signature"})
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        return hmac.new(key, text, hashlib.sha256).hexdigest()

    def one(c: Command) -> None:
        wire = encode(c.model_copy(update={"signature": digest(c)}))
        received = decode(wire, validator)
        if not hmac.compare_digest(received.signature.encode(), digest(received).encode()):
            raise RuntimeError("a command the coordinator signed did not verify")
    return one


def ed25519_round() -> Callable[[Command], None]:
    key, other = generate(), generate()
    trusted = TrustedKeys.of(key.private.public_key(), other.private.public_key())
    validator = adapter("commands")

    def one(c: Command) -> None:
        wire = encode(key.sign(c))
        decode(wire, validator)  # the executor validates the model too, as before
        if trusted.check(wire) is not None:
            raise RuntimeError("a command the coordinator signed did not verify")
    return one


def ack(i: int) -> CommandAcked:
    return CommandAcked(ts=time.time(), node=f"n{i % CLUSTER:04d}", command_id=f"cmd-{i:08d}", job="llm",
                        generation=3, status="done", elapsed_s=1.25)


def job(i: int) -> JobSubmitted:
    spec = JobSpec(id=f"llm-{i}", nodes=tuple(f"n{n:04d}" for n in range(8)),
                   throughput={4: 1.0e15, 8: 1.9e15}, ranks_per_node=8,
                   command=("python", "-m", "train", "--config", "llm.yaml"), checkpoint_dir="/ckpt/llm")
    return JobSubmitted(ts=time.time(), job=spec)


def coordinator_round(suffix: str) -> Callable[[object], None]:
    """Sign as the writer does (an operator, or the ack's node), check as the coordinator does."""
    operator = generate()
    nodes = {f"n{n:04d}": generate() for n in range(CLUSTER)}
    roles = {"operator": TrustedKeys.of(operator.private.public_key()),
             **{f"node:{n}": TrustedKeys.of(k.private.public_key()) for n, k in nodes.items()}}
    trust = Trust.of(roles)
    validator = adapter(suffix)

    def one(event) -> None:
        key = nodes[event.node] if isinstance(event, CommandAcked) else operator
        wire = encode(key.sign(event))
        if unverified(Record(suffix, 0, 0, None, decode(wire, validator), wire), trust) is not None:
            raise RuntimeError(f"a signed {suffix} record did not verify")
    return one


def time_per_command(one: Callable, commands: list) -> list[float]:
    samples = []
    for c in commands:
        started = time.perf_counter()
        one(c)
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=2000)
    args = parser.parse_args()
    commands = [command(i) for i in range(args.commands)]
    rounds = {"command hmac (before)": (hmac_round(b"k" * 32), commands),
              "command ed25519": (ed25519_round(), commands),
              "ack ed25519 (node)": (coordinator_round("acks"), [ack(i) for i in range(args.commands)]),
              "job ed25519 (operator)": (coordinator_round("jobs"), [job(i) for i in range(args.commands)])}
    for one, items in rounds.values():
        time_per_command(one, items[:50])  # warm up
    samples: dict[str, list[float]] = {name: [] for name in rounds}
    for start in range(0, len(commands), 100):  # alternate in blocks: machine drift hits all alike
        for name, (one, items) in rounds.items():
            samples[name] += time_per_command(one, items[start:start + 100])
    print(f"sign + verify of one record, {args.commands} each (ms; encode and decode included)")
    print(f"{'record, scheme':<24}{'median':>9}{'p99':>9}{'mean':>9}")
    for name, values in samples.items():
        values.sort()
        print(f"{name:<24}{statistics.median(values):>9.3f}{values[int(len(values) * 0.99)]:>9.3f}"
              f"{statistics.fmean(values):>9.3f}")
    worst = max(statistics.median(v) for v in samples.values())
    print(f"target: < 1 ms per record: {'met' if worst < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
