"""A plan's commands are built from one validated worker per job, copied per node: each command
equals the one validation builds from its fields."""

from tests.unit.coordinator.world import CONFIG, incident, submitted
from trainmedic.recovery.coordinator.core import ClusterState, react, settle, tick
from trainmedic.schemas import Command


def test_every_command_equals_its_validated_self():
    state = ClusterState.initial(CONFIG)
    log = react(state, submitted(), 0.0)
    log += react(state, incident("i-1", "SEV1", node="n2", category="gpu_lost"), 50.0)
    log += settle(state, tick(state, 60.0), 60.0)
    log += react(state, incident("i-2", "SEV2", ts=70.0), 70.0)
    commands = [e for e in log if e.type == "command"]
    assert {c.action for c in commands} >= {"start", "restart", "stop"}
    for command in commands:
        assert command == Command.model_validate(command.model_dump())
