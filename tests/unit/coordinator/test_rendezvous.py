"""Each generation's rendezvous secret and port: the same in every command of a generation and after a
coordinator restarts, another for every generation and submission, derived from the signing key only."""

from __future__ import annotations

from trainmedic.recovery.coordinator.rendezvous import PORTS, Rendezvous
from trainmedic.recovery.signing import generate
from trainmedic.schemas import Command, CommandAction, WorkerSpec

KEY = generate()


def command(*, node="n1", generation=3, submission="s1", base=29500, action=CommandAction.START) -> Command:
    worker = WorkerSpec(submission=submission, ranks=(0,), world_size=2, master_addr="10.0.0.1",
                        master_port=base, command=("train",))
    return Command(ts=1.0, node=node, id=f"c-{node}-{generation}", job="j", generation=generation,
                   action=action, worker=worker)


def sealed(**kw) -> tuple[str, int]:
    worker = Rendezvous.of(KEY).seal(command(**kw)).worker
    return worker.rendezvous_key, worker.master_port


def test_every_node_of_a_generation_gets_the_same_key_and_port_and_a_restart_derives_them_again():
    assert sealed(node="n1") == sealed(node="n2") == sealed(node="n1", action=CommandAction.RESTART)
    key, port = sealed()
    assert len(key) == 64 and 29500 <= port < 29500 + PORTS


def test_generations_submissions_and_coordinator_keys_each_get_their_own():
    keys = {sealed(generation=g)[0] for g in range(50)} | {sealed(submission="s2")[0]}
    assert len(keys) == 51
    assert len({sealed(generation=g)[1] for g in range(50)}) > 40  # ports spread over the range
    assert Rendezvous.of(generate()).seal(command()).worker.rendezvous_key != sealed()[0]


def test_a_resent_command_keeps_what_it_was_sealed_with():
    rendezvous = Rendezvous.of(KEY)
    once = rendezvous.seal(command())
    assert rendezvous.seal(once) == once
    stop = command(action=CommandAction.STOP).model_copy(update={"worker": None})
    assert rendezvous.seal(stop) == stop


def test_a_port_near_the_top_stays_a_port():
    assert 65500 <= sealed(base=65500)[1] <= 65535


def test_an_insecure_coordinator_still_seals_with_a_key_of_its_own():
    assert Rendezvous.of(None).seal(command()).worker.rendezvous_key != Rendezvous.of(None).seal(
        command()).worker.rendezvous_key
