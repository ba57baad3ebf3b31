import json

from trainmedic.runtime.faults import RankFault, due, read_faults


def test_faults_are_read_from_one_object_or_a_list(tmp_path):
    path = tmp_path / "faults.json"
    path.write_text(json.dumps({"fault": "hang", "rank": 1}))
    assert read_faults(path) == [RankFault(fault="hang", rank=1)]
    path.write_text(json.dumps([{"fault": "kill", "rank": 0, "at_step": 5, "generation": 0}]))
    assert read_faults(path)[0].at_step == 5


def test_absent_empty_or_invalid_files_arm_nothing(tmp_path):
    assert read_faults(None) == [] and read_faults(tmp_path / "absent") == []
    (tmp_path / "bad").write_text('{"fault": "explode", "rank": 0}')
    assert read_faults(tmp_path / "bad") == []


def test_a_fault_applies_to_its_rank_from_its_step_in_its_generation():
    faults = [RankFault(fault="kill", rank=1, at_step=5, generation=0)]
    assert due(faults, rank=1, step=5, generation=0) == faults[0]
    assert due(faults, rank=1, step=9, generation=0) == faults[0]
    assert due(faults, rank=1, step=4, generation=0) is None
    assert due(faults, rank=0, step=5, generation=0) is None
    assert due(faults, rank=1, step=5, generation=1) is None
