"""The executor's and the keys' own files are their owner's only (issue 42, A3): a rank, or any
other local user, read the ledger, ranks.json and keys.json (0644)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from trainmedic.recovery import keyring
from trainmedic.recovery.executor import leftovers
from trainmedic.recovery.executor.ledger import Ledger


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_ledger_ranks_json_and_keys_json_are_0600_even_under_a_lenient_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        ledger = Ledger.open(tmp_path / "ledgers" / "x.jsonl")
        ledger.record(topic="t", partition=0, offset=1)
        ledger.close()
        leftovers.save(tmp_path / "ranks.json", [])
        keyring.generate_key(tmp_path / "keys", now=1.0)
    finally:
        os.umask(old)
    assert {name: mode(path) for name, path in (("ledger", tmp_path / "ledgers" / "x.jsonl"),
                                                ("ranks", tmp_path / "ranks.json"),
                                                ("keys", tmp_path / "keys" / keyring.MANIFEST))} == {
        "ledger": 0o600, "ranks": 0o600, "keys": 0o600}


def test_a_ledger_an_older_version_left_0644_is_made_0600(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("")
    path.chmod(0o644)
    Ledger.open(path).close()
    assert mode(path) == 0o600
