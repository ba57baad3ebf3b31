"""A job id becomes a directory under the executor's state dir: one that could leave it is refused."""

import pytest

from trainmedic.recovery.executor.core.decide import Apply, Refuse, decide
from trainmedic.schemas import Command, CommandAction, WorkerSpec

SPEC = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                  ranks=(0,), world_size=1, master_addr="h", master_port=29500, command=("train",))


def start(job: str):
    command = Command(ts=999.0, node="n1", id="c1", job=job, generation=0, action=CommandAction.START,
                      worker=SPEC)
    return decide(command, received=None, node="n1", trusted=None, now=1000.0, freshness_s=60.0, group=None,
                  applied=())


@pytest.mark.parametrize("job", ["..", ".", "../../etc", "a/b", "/abs", "x\\y", "a b", "é"])
def test_a_job_id_that_is_not_one_safe_path_component_is_refused(job):
    decision = start(job)
    assert isinstance(decision, Refuse)
    assert "cannot name this node's log and snapshot directories" in decision.reason


@pytest.mark.parametrize("job", ["llm", "llm-7b.v2", "team:llm_1", "..x"])
def test_ordinary_job_ids_start(job):
    assert isinstance(start(job), Apply)


@pytest.mark.parametrize("submission", [None, "..", "a/b"])
def test_a_launch_that_names_no_usable_submission_is_refused(submission):
    """Its ranks' files would have no directory of their own: they could restore another
    submission's snapshots."""
    command = Command(ts=999.0, node="n1", id="c1", job="llm", generation=0, action=CommandAction.START,
                      worker=SPEC.model_copy(update={"submission": submission}))
    decision = decide(command, received=None, node="n1", trusted=None, now=1000.0, freshness_s=60.0,
                      group=None, applied=())
    assert isinstance(decision, Refuse) and "names no submission of job llm" in decision.reason
