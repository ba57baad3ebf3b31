"""A rank's environment: an allow-list of the executor's, no credentials, the contract on top."""

from __future__ import annotations

from trainmedic.recovery.executor.core.rank_env import NEVER, base_env, rank_env

EXECUTOR_ENV = {
    "PATH": "/usr/bin", "HOME": "/home/t", "LANG": "C.UTF-8", "LC_ALL": "C", "PYTHONPATH": "/src",
    "TMPDIR": "/tmp", "USER": "t", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO",
    "OMP_NUM_THREADS": "4",
    "TRAINMEDIC_DEMO_FAULTS": "/run/faults.json",
    # what a rank must never see
    "TRAINMEDIC_CLUSTER_KEY": "k", "TRAINMEDIC_CLUSTER_KEY_FILE": "/etc/tm/key",
    "TRAINMEDIC_KAFKA_CONFIG": '{"sasl.password": "p"}', "KAFKA_SASL_PASSWORD": "p",
    "AWS_SECRET_ACCESS_KEY": "s",
    "GITHUB_TOKEN": "t", "HF_TOKEN": "h", "DB_PASSWORD": "d", "SSH_AUTH_SOCK": "/run/ssh",
    "TRAINMEDIC_HOME": "/var/tm", "TRAINMEDIC_EXECUTOR_NODE": "n1", "LD_PRELOAD": "/x.so",
    "WANDB_PROJECT": "w",
}
PASSED = {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "USER", "CUDA_VISIBLE_DEVICES",
          "NCCL_DEBUG", "OMP_NUM_THREADS", "TRAINMEDIC_DEMO_FAULTS"}


def test_a_rank_gets_what_programs_and_accelerators_need_and_no_secret() -> None:
    assert set(base_env(EXECUTOR_ENV)) == PASSED


def test_the_policy_adds_names_and_prefixes_but_a_secret_only_by_its_exact_name() -> None:
    env = base_env(EXECUTOR_ENV, ("WANDB_*", "HF_TOKEN", "TRAINMEDIC_*", "AWS_*"))
    assert set(env) - PASSED == {"WANDB_PROJECT", "HF_TOKEN", "TRAINMEDIC_HOME", "TRAINMEDIC_EXECUTOR_NODE"}


def test_trainmedics_own_credentials_never_pass_even_when_listed() -> None:
    listed = ("TRAINMEDIC_CLUSTER_KEY", "TRAINMEDIC_CLUSTER_KEY_FILE", "TRAINMEDIC_KAFKA_CONFIG")
    assert not set(listed) & set(base_env(EXECUTOR_ENV, listed))


def test_no_kafka_settings_reach_a_rank_not_even_the_retired_rank_principals() -> None:
    parent = {**EXECUTOR_ENV, "TRAINMEDIC_RANK_KAFKA_CONFIG": '{"sasl.username": "rank"}',
              "TRAINMEDIC_CREDENTIALS_DIR": "/var/tm/credentials"}
    env = base_env(parent, ("TRAINMEDIC_*",))
    kafka = {"TRAINMEDIC_KAFKA_CONFIG", "TRAINMEDIC_RANK_KAFKA_CONFIG", "TRAINMEDIC_CREDENTIALS_DIR"}
    assert not kafka & set(env)


def test_the_hooks_channel_and_the_worker_contract_win_over_the_parent() -> None:
    parent = {**EXECUTOR_ENV, "RANK": "7", "NCCL_X": "1"}
    channel = {"TRAINMEDIC_REPORT_SOCKET": "/tmp/trainmedic-0/a.sock"}
    env = rank_env(parent, ("RANK",), channel, {"RANK": "0", "TRAINMEDIC_JOB": "llm"})
    assert (env["RANK"], env["TRAINMEDIC_JOB"], env["TRAINMEDIC_REPORT_SOCKET"]) == (
        "0", "llm", "/tmp/trainmedic-0/a.sock")
    assert env["NCCL_X"] == "1" and "TRAINMEDIC_CLUSTER_KEY" not in env


def test_the_jobs_env_sits_between_the_executors_and_the_contract_and_never_passes_a_credential() -> None:
    channel = {"TRAINMEDIC_REPORT_SOCKET": "/tmp/trainmedic-0/a.sock"}
    job = {"NCCL_DEBUG": "WARN", "LR": "3e-4", "HF_TOKEN": "the-jobs-own", "RANK": "7",
           "TRAINMEDIC_REPORT_SOCKET": "/tmp/mine.sock", "TRAINMEDIC_CLUSTER_KEY": "k2",
           "TRAINMEDIC_KAFKA_CONFIG": "{}", "TRAINMEDIC_RANK_KAFKA_CONFIG": "{}"}
    env = rank_env(EXECUTOR_ENV, (), channel, {"RANK": "0"}, job=job)
    assert (env["NCCL_DEBUG"], env["LR"], env["HF_TOKEN"]) == ("WARN", "3e-4", "the-jobs-own")  # over base
    assert (env["RANK"], env["TRAINMEDIC_REPORT_SOCKET"]) == ("0", "/tmp/trainmedic-0/a.sock")  # they win
    assert not NEVER & env.keys()
    without = rank_env(EXECUTOR_ENV, (), channel, {"RANK": "0"})
    assert without == rank_env(EXECUTOR_ENV, (), channel, {"RANK": "0"}, job={})
