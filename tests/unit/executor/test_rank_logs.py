"""Reading rank logs back as `trainmedic job logs` does: found per node, interleaved, followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmedic.recovery.executor.rank_logs import Tail, find, interleaved, log_name


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A TRAINMEDIC_HOME whose jobs' directories, beside it, are in home too."""
    return tmp_path / ".trainmedic"


SUBMISSION = "20261205T190845.123Z-3f2a9c1b"


def write(home: Path, node: str, job: str, generation: int, rank: int, text: str,
          submission: str = SUBMISSION) -> Path:
    path = home.parent / ".trainmedic-jobs" / node / job / submission / "logs" / log_name(generation, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(text)
    return path


def test_all_ranks_of_every_node_interleaved_a_generation_at_a_time(home: Path) -> None:
    write(home, "n0", "j", 0, 0, "step 0\nstep 1\n")
    write(home, "n1", "j", 0, 1, "step 0\nstep 1\nbye\n")
    write(home, "n1", "j", 1, 1, "restored\n")
    write(home, "n0", "other", 0, 0, "not ours\n")
    write(home, "n0", "j", 0, 7, "")
    logs = home.parent / ".trainmedic-jobs" / "n0" / "j" / SUBMISSION / "logs"
    (logs / "notes.txt").write_text("not a rank log\n")
    assert list(interleaved(find(home, "j"))) == [
        "== generation 0: rank 0 on n0, rank 1 on n1, rank 7 on n0 ==",
        "[rank 0] step 0", "[rank 1] step 0", "[rank 0] step 1", "[rank 1] step 1", "[rank 1] bye",
        "== generation 1: rank 1 on n1 ==", "[rank 1] restored",
    ]
    assert [(log.generation, log.node) for log in find(home, "j", rank=1)] == [(0, "n1"), (1, "n1")]
    assert find(home, "nothing-here") == []


def test_only_one_submission_of_a_job_is_read_by_default_the_newest(home: Path) -> None:
    """A job id submitted again writes its logs apart: never read with an earlier submission's."""
    earlier = "20261204T080000.000Z-00000000"
    write(home, "n0", "j", 0, 0, "the earlier run\n", submission=earlier)
    write(home, "n2", "j", 1, 0, "the earlier run, on a node the later one did not use\n", submission=earlier)
    write(home, "n0", "j", 0, 0, "this run\n")
    assert [line for line in interleaved(find(home, "j")) if "run" in line] == ["[rank 0] this run"]
    assert {log.node for log in find(home, "j", submission=earlier)} == {"n0", "n2"}
    write(home, "n3", "j", 0, 7, "rank 7 of the earlier run only\n", submission=earlier)
    assert find(home, "j", rank=7) == []  # the newest run had no rank 7: never the earlier's


def test_following_returns_whole_new_lines_and_new_files_from_their_start(home: Path) -> None:
    tail = Tail()
    write(home, "n0", "j", 0, 0, "a\npart")
    assert tail.read(find(home, "j")) == ["== generation 0: rank 0 on n0 ==", "[rank 0] a"]
    assert tail.read(find(home, "j")) == []
    write(home, "n0", "j", 0, 0, "ial\nb\n")
    write(home, "n1", "j", 1, 1, "c\nno newline")
    assert tail.read(find(home, "j")) == ["[rank 0] partial", "[rank 0] b",
                                              "== generation 1: rank 1 on n1 ==", "[rank 1] c"]
    assert tail.rest() == ["[rank 1] no newline"]


def test_a_line_without_end_is_held_only_up_to_the_bound(home: Path) -> None:
    from trainmedic.recovery.executor.rank_logs import MAX_LINE

    tail = Tail()
    write(home, "n1", "j", 0, 0, "x" * (3 * MAX_LINE))  # a rank that never ends its line
    lines = tail.read(find(home, "j"))
    assert lines[1] == "[rank 0] " + "x" * MAX_LINE + f" [cut: {2 * MAX_LINE} more bytes]"
    assert sum(len(rest) for _, rest in tail.partial.values()) <= MAX_LINE
    write(home, "n1", "j", 0, 0, "y" * (2 * MAX_LINE) + "\nok\n")
    assert tail.read(find(home, "j")) == ["[rank 0] " + "y" * MAX_LINE + f" [cut: {MAX_LINE} more bytes]",
                                          "[rank 0] ok"]


def test_a_whole_log_shows_a_100_kb_line_cut_and_saying_so(home: Path) -> None:
    """Issue 42, E: `job logs` printed a rank's 100 KB lines whole."""
    from trainmedic.recovery.executor.rank_logs import MAX_LINE

    write(home, "n1", "j", 0, 0, "a\n" + "z" * 100_000 + "\nb\n")
    assert list(interleaved(find(home, "j")))[1:] == [
        "[rank 0] a", "[rank 0] " + "z" * MAX_LINE + f" [cut: {100_000 - MAX_LINE} more bytes]", "[rank 0] b"]


@pytest.mark.parametrize("replaced_by", ["link", "fifo"])
def test_a_log_a_rank_replaced_is_neither_followed_nor_waited_on(home: Path, tmp_path: Path,
                                                                 replaced_by: str) -> None:
    """Issue 42, item 1: a rank makes its log a link to a secret (or a FIFO): `job logs` and the tee
    of `trainmedic run`, perhaps run by root, printed the secret (or blocked)."""
    secret = tmp_path / "secret"
    secret.write_text("the admin password\n")
    write(home, "n1", "j", 0, 0, "mine\n")
    write(home, "n1", "j", 0, 1, "")
    [_, replaced] = find(home, "j")
    replaced.path.unlink()
    if replaced_by == "link":
        replaced.path.symlink_to(secret)
    else:
        os.mkfifo(replaced.path)
    shown = [*interleaved(find(home, "j")), *Tail().read(find(home, "j"))]
    assert "[rank 0] mine" in shown and not any("password" in line for line in shown)
