"""State follows the user, not the directory: the same home from any folder, per the XDG layout, and
the local broker's port from TRAINMEDIC_BROKER_PORT for every command that starts it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmedic.bus.settings import credentials_dir, home
from trainmedic.common.errors import ConfigError
from trainmedic.local.broker import broker_port


def test_the_home_is_the_users_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"HOME": str(tmp_path / "me")}
    for where in (tmp_path / "project", tmp_path / "elsewhere"):
        where.mkdir()
        monkeypatch.chdir(where)
        assert home(env) == tmp_path / "me" / ".local" / "state" / "trainmedic"
    assert credentials_dir(env) == tmp_path / "me" / ".local" / "state" / "trainmedic" / "credentials"


def test_xdg_state_home_and_trainmedic_home_move_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    xdg = {"HOME": "/nowhere", "XDG_STATE_HOME": str(tmp_path / "state")}
    assert home(xdg) == tmp_path / "state" / "trainmedic"
    assert home({"HOME": "/nowhere", "TRAINMEDIC_HOME": "mine"}) == tmp_path / "mine"
    assert home({"TRAINMEDIC_HOME": "~/tm"}) == Path(os.path.expanduser("~/tm")).resolve()


def test_the_broker_port_comes_from_the_environment() -> None:
    assert broker_port({}) == 9092
    assert broker_port({"TRAINMEDIC_BROKER_PORT": "19092"}) == 19092
    for bad in ("abc", "0", "65535", "-1"):
        with pytest.raises(ConfigError, match="TRAINMEDIC_BROKER_PORT"):
            broker_port({"TRAINMEDIC_BROKER_PORT": bad})
