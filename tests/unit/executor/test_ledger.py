from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.ledger import Ledger


def test_positions_generations_and_applied_ids_survive_a_reopen(tmp_path):
    ledger = Ledger.open(tmp_path / "l.jsonl")
    ledger.record(topic="t", partition=1, offset=3)
    ledger.record(topic="t", partition=1, offset=4, command_id="a", job="j", generation=2, applied=True)
    ledger.record(topic="t", partition=1, offset=5, command_id="b", job="j", generation=1, applied=True)
    ledger.close()
    state = Ledger.open(tmp_path / "l.jsonl").state
    assert state.applied == {"a", "b"}
    assert state.generations == {"j": 2}
    assert state.positions == {("t", 1): 6}


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "l.jsonl"
    ledger = Ledger.open(path)
    ledger.record(topic="t", partition=0, offset=0, command_id="a", job="j", generation=0, applied=True)
    ledger.close()
    with path.open("a") as handle:
        handle.write('{"topic": "t", "partit')
    assert Ledger.open(path).state.applied == {"a"}


def test_actions_and_final_answers_survive_a_reopen(tmp_path):
    ledger = Ledger.open(tmp_path / "l.jsonl")
    ledger.record(topic="t", partition=0, offset=0, command_id="a", job="j", generation=0, applied=True,
                  action="start", ranks=(2, 3))
    ledger.record_answer("a", RecordedAck("done", None, 0.25))
    assert Ledger.open(tmp_path / "l.jsonl").state.newest.ranks == (2, 3)
    ledger.record(topic="t", partition=0, offset=1, command_id="b", job="j", generation=1, applied=True,
                  action="stop")
    ledger.close()
    state = Ledger.open(tmp_path / "l.jsonl").state
    assert state.answers == {"a": RecordedAck("done", None, 0.25)}
    assert (state.last["j"].id, state.last["j"].action, state.newest.id) == ("b", "stop", "b")
    assert state.positions == {("t", 0): 2}


def test_a_line_written_before_actions_were_recorded_reads_with_no_action(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"topic":"t","partition":0,"offset":0,"applied":true,"command":"a","job":"j",'
                    '"generation":3}\n')
    state = Ledger.open(path).state
    assert (state.last["j"].action, state.generations, state.answers) == (None, {"j": 3}, {})
