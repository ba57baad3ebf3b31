"""Runtime fault injection through a control file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.producers.control import ControlFile
from trainmedic.producers.faults import HardwareFault, XidFault
from trainmedic.producers.rounds import apply_control


def append(path: Path, text: str) -> None:
    with path.open("a") as file:
        file.write(text)


def test_each_appended_line_is_handed_out_once(tmp_path: Path) -> None:
    path = tmp_path / "ctl"
    control = ControlFile.at_end(path)
    assert control.new_lines() == []  # no file yet
    append(path, "xid=79,gpu=3\n\n# a comment\nxid=4")
    assert control.new_lines() == ["xid=79,gpu=3"]  # "xid=4" is not complete yet
    append(path, "8,gpu=1\n")
    assert control.new_lines() == ["xid=48,gpu=1"]
    assert control.new_lines() == []


def test_lines_from_an_earlier_run_are_skipped_and_truncation_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "ctl"
    path.write_text("xid=79\n")
    control = ControlFile.at_end(path)
    assert control.new_lines() == []
    path.write_text("lost\n")
    assert control.new_lines() == ["lost"]


def test_good_lines_are_injected_bad_ones_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "ctl"
    control = ControlFile.at_end(path)
    append(path, "xid=79,gpu=3\nxid=banana\nxid=48,node=n09\nxid=13\n")
    injected: list[tuple[HardwareFault, float]] = []

    def inject(fault: HardwareFault, now: float) -> None:
        if isinstance(fault, XidFault) and fault.node == "n09":
            raise ConfigError("no node n09")
        injected.append((fault, now))

    with caplog.at_level(logging.INFO, logger="trainmedic.producers.rounds"):
        apply_control(control, inject, now=5.0)
    assert injected == [(XidFault(code=79, gpu=3), 5.0), (XidFault(code=13), 5.0)]
    errors = [r.message for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "xid=banana" in errors[0] and "no node n09" in errors[1]
