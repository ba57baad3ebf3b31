"""An incident's evidence for a failed rank ends with what it last said (issue 33): the tail of its
output for an exit, the traceback's last frame for an exception; one line each, bounded."""

from __future__ import annotations

from tests.unit.streams.events import error, exited, healthy, opened, run, start, steps

TAIL = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 1, in <module>\n"
        "    import no_such_module\nModuleNotFoundError: No module named 'no_such_module'")


def job_running(until: float):
    return healthy(0, until + 60) + [start(0.5, r) for r in range(8)] + steps(1, until)


def test_a_failed_exits_evidence_ends_with_the_last_lines_of_its_output() -> None:
    (incident,) = opened(run(job_running(10) + [exited(10.2, 1, code=1, output_tail=TAIL)])[0])
    (line,) = [e for e in incident.evidence if "exited" in e]
    assert line.endswith("rank 1 on n0: exited with code 1 | File \"/w/train.py\", line 1, in <module> | "
                         "import no_such_module | ModuleNotFoundError: No module named 'no_such_module'")


def test_an_exceptions_evidence_names_where_it_was_raised_and_stays_one_bounded_line() -> None:
    traceback = "Traceback (most recent call last):\n" + "".join(
        f"  File \"/w/train.py\", line {n}, in step\n    {'x' * 500}\n" for n in range(50)) + "KeyError: 'w'"
    (incident,) = opened(run(job_running(10) + [error(10.2, 0, "KeyError: 'w'", traceback=traceback)])[0])
    (line,) = [e for e in incident.evidence if "KeyError" in e]
    assert "\n" not in line and len(line) < 700
    assert line.endswith("x" * 200) and "KeyError: 'w' | " in line


def test_without_a_tail_the_evidence_is_as_before() -> None:
    (incident,) = opened(run(job_running(10) + [exited(10.2, 1, code=1)])[0])
    assert any(e.endswith("rank 1 on n0: exited with code 1") for e in incident.evidence)
