import dataclasses
import re

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.runtime.env import WorkerEnv
from trainmedic.schemas import RestoreSource


def test_the_env_contract_round_trips():
    env = WorkerEnv(master_addr="10.0.0.1", master_port=29500, rank=3, world_size=4, local_rank=1,
                    local_world_size=2, job="j", node="n2", generation=5,
                    restore=RestoreSource(kind="replica", rank=0, node="n1"),
                    checkpoint_dir="/ckpt", snapshot_dir="/snap")
    variables = env.to_env()
    assert variables["RANK"] == "3" and variables["TRAINMEDIC_GENERATION"] == "5"
    assert WorkerEnv.from_env(variables) == env


def test_a_missing_variable_is_named():
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        WorkerEnv.from_env({"RANK": "0"})
    with pytest.raises(ConfigError, match="RANK='x'"):
        WorkerEnv.from_env({"MASTER_ADDR": "h", "MASTER_PORT": "1", "RANK": "x", "WORLD_SIZE": "1"})


def test_defaults_without_trainmedic_variables():
    env = WorkerEnv.from_env({"MASTER_ADDR": "h", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1"})
    assert env.restore.kind == "none" and env.generation == 0 and env.snapshot_dir is None


def test_under_torchrun_the_generation_is_the_restart_count():
    torchrun = {"MASTER_ADDR": "h", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1",
                "TORCHELASTIC_RESTART_COUNT": "2"}
    assert WorkerEnv.from_env(torchrun).generation == 2
    assert WorkerEnv.from_env({**torchrun, "TRAINMEDIC_GENERATION": "7"}).generation == 7


def test_the_jobs_failure_settings_travel_as_seconds_and_a_bad_value_is_named():
    base = {"MASTER_ADDR": "h", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1"}
    env = WorkerEnv.from_env({**base, "TRAINMEDIC_COLLECTIVE_TIMEOUT_S": "300.0",
                              "TRAINMEDIC_HANG_FLOOR_S": "2m"})
    assert (env.collective_timeout_s, env.hang_floor_s) == (300.0, 120.0)
    assert WorkerEnv.from_env(env.to_env()) == env
    tiny = WorkerEnv.from_env(base)
    assert (tiny.collective_timeout_s, tiny.hang_floor_s) == (None, None)  # the services' defaults
    assert "TRAINMEDIC_HANG_FLOOR_S" not in tiny.to_env()
    odd = dataclasses.replace(tiny, collective_timeout_s=1e-05)  # repr writes an exponent
    assert WorkerEnv.from_env(odd.to_env()).collective_timeout_s == 1e-05
    for value, says in [("x", "TRAINMEDIC_COLLECTIVE_TIMEOUT_S: 'x' is not a duration"),
                        ("-5", "TRAINMEDIC_COLLECTIVE_TIMEOUT_S='-5' must be a finite number"),
                        ("inf", "TRAINMEDIC_COLLECTIVE_TIMEOUT_S='inf' must be a finite number")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            WorkerEnv.from_env({**base, "TRAINMEDIC_COLLECTIVE_TIMEOUT_S": value})
