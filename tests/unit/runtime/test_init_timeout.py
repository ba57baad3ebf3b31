"""init_from_env's timeout: the caller's when given, else the job's collective timeout, else 60 s."""

from __future__ import annotations

import pytest

from trainmedic.runtime import rank

CONTRACT = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1"}


class Rendezvous(Exception):
    """Raised where the rank would meet its store: the timeout it would wait for is all we need."""


def test_the_jobs_collective_timeout_is_the_default_and_an_explicit_timeout_wins(monkeypatch) -> None:
    asked: list[float] = []

    def store(contract, timeout_s: float, env):
        asked.append(timeout_s)
        raise Rendezvous

    monkeypatch.setattr(rank, "join_store", store)
    job = {**CONTRACT, "TRAINMEDIC_COLLECTIVE_TIMEOUT_S": "300.0"}
    for env, given in ((job, {}), (job, {"timeout_s": 7.0}), (CONTRACT, {})):
        with pytest.raises(Rendezvous):
            rank.init_from_env(env=env, backend="gloo", **given)
    assert asked == [300.0, 7.0, 60.0]
