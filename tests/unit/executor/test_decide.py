from trainmedic.recovery.executor.core.decide import Apply, Reack, Refuse, Skip, Step, decide
from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.core.state import GroupState, LocalGroup
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import Command, CommandAction, WorkerSpec, encode

KEY = generate()
TRUSTED = TrustedKeys.of(KEY.private.public_key())
NOW = 1000.0
SPEC = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                  ranks=(0, 1), world_size=2, master_addr="h", master_port=29500, command=("train",))


def cmd(action=CommandAction.START, *, key=KEY, **changes) -> Command:
    fields = dict(ts=NOW - 1, node="n1", id="c1", job="j", generation=1, action=action, worker=SPEC)
    command = Command(**{**fields, **changes})
    return key.sign(command) if key else command


def run(command, group=None, applied=(), trusted=TRUSTED, freshness_s=60.0):
    return decide(command, received=encode(command), node="n1", trusted=trusted, now=NOW,
                  freshness_s=freshness_s, group=group, applied=applied)


def test_a_fresh_signed_start_launches():
    assert run(cmd()) == Apply((Step.LAUNCH,), "launch 2 ranks")


def test_forged_and_unsigned_commands_are_refused_as_unverified():
    for forged, why in ((cmd(key=generate()), "unknown key id"), (cmd(key=None), "unsigned")):
        decision = run(forged)
        assert isinstance(decision, Refuse) and decision.unverified and why in decision.reason


def test_the_signature_is_checked_on_the_command_as_received_not_on_the_model():
    signed = cmd()
    tampered = encode(signed).replace(b'"train"', b'"evil"')
    decision = decide(signed, received=tampered, node="n1", trusted=TRUSTED, now=NOW, freshness_s=60.0,
                      group=None, applied=())
    assert isinstance(decision, Refuse) and "bad signature" in decision.reason


def test_a_command_signed_for_another_deployment_is_refused_as_unverified():
    def under(prefix: str, command: Command):
        return decide(command, received=encode(command), node="n1", trusted=TRUSTED, now=NOW,
                      freshness_s=60.0, group=None, applied=(), deployment=prefix)

    assert isinstance(under("prod.", cmd(deployment="prod.")), Apply)
    for command in (cmd(deployment="test."), cmd()):  # another prefix's, or one bound to none
        decision = under("prod.", command)
        assert isinstance(decision, Refuse) and decision.unverified
        assert decision.reason.startswith("other deployment: the command was signed for ")


def test_insecure_mode_accepts_unsigned():
    assert isinstance(run(cmd(key=None), trusted=None), Apply)


def test_a_command_for_another_node_is_refused():
    decision = run(cmd(node="n2"))
    assert isinstance(decision, Refuse) and "'n2'" in decision.reason


def test_stale_and_future_commands_are_refused():
    assert "stale" in run(cmd(ts=NOW - 61)).reason
    assert "future" in run(cmd(ts=NOW + 61)).reason
    assert isinstance(run(cmd(ts=NOW - 59)), Apply)


def test_an_older_generation_is_fenced_off():
    group = LocalGroup("j", 3, GroupState.RUNNING, SPEC)
    decision = run(cmd(CommandAction.STOP, generation=2), group)
    assert isinstance(decision, Refuse) and "fenced" in decision.reason


def test_an_applied_command_is_skipped_not_refused_even_when_stale():
    assert isinstance(run(cmd(ts=NOW - 600), applied={"c1"}), Skip)


def test_at_most_once_across_a_restart(tmp_path):
    ledger = Ledger.open(tmp_path / "ledger.jsonl")
    command = cmd()
    assert isinstance(run(command, applied=ledger.state.applied), Apply)
    ledger.record(topic="t", partition=0, offset=5, command_id=command.id, job="j", generation=1,
                  applied=True)
    ledger.close()
    reopened = Ledger.open(tmp_path / "ledger.jsonl")
    assert isinstance(run(command, applied=reopened.state.applied), Skip)
    assert reopened.state.positions == {("t", 0): 6}
    assert reopened.state.generations == {"j": 1}


def test_start_stops_what_runs_before_launching_a_new_generation():
    running = LocalGroup("j", 0, GroupState.RUNNING, SPEC)
    assert run(cmd(generation=1), running).steps == (Step.STOP, Step.LAUNCH)
    assert run(cmd(generation=0), running).steps == ()
    assert run(cmd(CommandAction.RESTART, generation=0), running).steps == (Step.STOP, Step.LAUNCH)
    failed = LocalGroup("j", 1, GroupState.FAILED, SPEC)
    assert run(cmd(generation=1), failed).steps == (Step.STOP, Step.LAUNCH)


def test_start_without_a_command_is_refused():
    bare = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1)
    assert "needs a worker spec" in run(cmd(worker=bare)).reason
    assert "needs a worker spec" in run(cmd(CommandAction.RESTART, worker=None)).reason


def test_a_relative_workdir_is_refused_and_an_absolute_one_launches():
    relative = SPEC.model_copy(update={"workdir": "jobs/llm"})
    refusal = run(cmd(worker=relative))
    assert isinstance(refusal, Refuse) and "workdir 'jobs/llm' is relative" in refusal.reason
    assert run(cmd(worker=SPEC.model_copy(update={"workdir": "/srv/jobs/llm"}))).steps == (Step.LAUNCH,)


def test_a_launch_without_a_rendezvous_key_is_refused():
    for action in (CommandAction.START, CommandAction.RESTART):
        refusal = run(cmd(action, worker=SPEC.model_copy(update={"rendezvous_key": None})))
        assert isinstance(refusal, Refuse) and "no rendezvous key" in refusal.reason


def test_stop_when_nothing_runs_is_done_with_no_steps():
    assert run(cmd(CommandAction.STOP)).steps == ()
    stopped = LocalGroup("j", 1, GroupState.STOPPED, SPEC)
    assert run(cmd(CommandAction.STOP), stopped).steps == ()
    assert run(cmd(CommandAction.STOP), LocalGroup("j", 1, GroupState.RUNNING, SPEC)).steps == (Step.STOP,)


def test_reattempt_needs_the_running_generation():
    running = LocalGroup("j", 1, GroupState.RUNNING, SPEC)
    assert run(cmd(CommandAction.REATTEMPT), running).steps == (Step.SIGNAL_REATTEMPT,)
    assert "but 1 runs" in run(cmd(CommandAction.REATTEMPT, generation=2), running).reason
    assert "no running ranks" in run(cmd(CommandAction.REATTEMPT)).reason


def test_a_redelivered_applied_command_is_answered_with_its_recorded_ack(tmp_path):
    ledger = Ledger.open(tmp_path / "ledger.jsonl")
    ledger.record(topic="t", partition=0, offset=5, command_id="c1", job="j", generation=1, applied=True,
                  action="start")
    ledger.record_answer("c1", RecordedAck("failed", "no such file: train", 0.5))
    ledger.close()
    state = Ledger.open(tmp_path / "ledger.jsonl").state
    resent = cmd(ts=NOW - 600)  # even a stale copy: the answer does not change with time
    decision = decide(resent, received=encode(resent), node="n1", trusted=TRUSTED, now=NOW, freshness_s=60.0,
                      group=None, applied=state.applied, answers=state.answers)
    assert isinstance(decision, Reack)
    assert decision.answer == RecordedAck("failed", "no such file: train", 0.5)


def test_a_forged_copy_of_an_applied_command_gets_no_recorded_ack():
    forged = cmd(key=generate())
    decision = decide(forged, received=encode(forged), node="n1", trusted=TRUSTED, now=NOW, freshness_s=60.0,
                      group=None, applied={"c1"}, answers={"c1": RecordedAck("done")})
    assert isinstance(decision, Refuse)
