"""The executor's worker_start carries the coordinator's signed placement of its rank's generation on the
node (from the start or restart command, without the command's secrets), so the detector can verify it
(issue 45, Deliver 2; docs/detection.md, "Generations come from the coordinator")."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest

from tests.unit.executor.report_lines import RANK, line
from trainmedic.recovery import keyring
from trainmedic.recovery.executor.command_applier import _placement
from trainmedic.recovery.executor.core.reports import RankReports, ReportLimits, check
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.schemas import Command, WorkerStarted, encode
from trainmedic.schemas.commands import CommandAction, Placement, WorkerSpec
from trainmedic.schemas.wire import decode_telemetry
from trainmedic.streams.placements import placements_of

PREFIX = "trainmedic."
SECRET = "ab" * 32


@pytest.fixture
def command(tmp_path) -> Command:
    """A start of job llm at generation 3 for ranks 0-1 on n1, with its placement, signed as the
    coordinator sends it, and decoded as the executor reads it."""
    keyring.generate_key(tmp_path, time.time())
    key = keyring.load_signing(tmp_path)
    placement = key.sign(Placement(job="llm", generation=3, node="n1", ranks=(0, 1), deployment=PREFIX))
    signed = key.sign(Command(
        ts=1.0, node="n1", id="c1", job="llm", generation=3, action=CommandAction.START, deployment=PREFIX,
        worker=WorkerSpec(ranks=(0, 1), world_size=4, master_addr="n0", master_port=29500,
                          rendezvous_key=SECRET, env={"TOKEN": "hush"}), placement=placement))
    return Command.model_validate_json(encode(signed))


def test_the_worker_start_carries_the_placement_without_the_commands_secrets_and_it_verifies(
        command, tmp_path) -> None:
    placement = _placement(command)
    assert SECRET not in placement and "hush" not in placement
    launched = RankReports.fresh(replace(RANK, placement=placement), ReportLimits(), now=1.0)
    # the rank claims a placement of its own: the executor's replaces it
    event = check(line(type="worker_start", placement="forged"), launched, node="n1", pid=7, now=2.0,
                  limits=ReportLimits())
    assert isinstance(event, WorkerStarted) and event.placement == placement
    on_the_wire = decode_telemetry(encode(event))  # as the detector reads it
    placed = placements_of(tmp_path, PREFIX, logging.getLogger("test"))(on_the_wire.placement, "n1")
    assert (placed.node, placed.job, placed.generation, placed.ranks) == ("n1", "llm", 3, (0, 1))


def test_a_rank_launched_without_a_placement_reports_none() -> None:
    event = check(line(type="worker_start", placement="forged"), RankReports.fresh(RANK, ReportLimits(), 1.0),
                  node="n1", pid=7, now=2.0, limits=ReportLimits())
    assert isinstance(event, WorkerStarted) and event.placement is None


def test_a_command_without_a_signed_placement_places_nothing(command) -> None:
    assert _placement(command.model_copy(update={"placement": None})) is None
    unsigned = command.placement.model_copy(update={"signature": None, "key_id": None})
    assert _placement(command.model_copy(update={"placement": unsigned})) is None


def test_the_ledger_keeps_the_placement_for_ranks_adopted_after_a_restart(command, tmp_path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger.open(path)
    placement = _placement(command)
    ledger.record(topic="t", partition=0, offset=4, command_id=command.id, job="llm", generation=3,
                  applied=True, action="start", ranks=(0, 1), placement=placement)
    ledger.record(topic="t", partition=0, offset=5, command_id="c2", job="llm", generation=3, applied=True,
                  action="reattempt")  # places nothing: the start's placement stays
    ledger.close()
    assert Ledger.open(path).state.placements == {"llm": (3, placement)}
