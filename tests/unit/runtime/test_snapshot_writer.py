"""Snapshots written behind the loop: one at a time, in order, and a failed write is not silent."""

from __future__ import annotations

import threading

import pytest

from trainmedic.runtime.snapshot_writer import SnapshotWriter


def test_writes_run_one_at_a_time_in_order_behind_the_caller() -> None:
    writer, done, release = SnapshotWriter(), [], threading.Event()
    writer.submit(lambda: (release.wait(5), done.append(1)))
    assert done == []  # the caller went on while the first write waits
    release.set()
    writer.submit(lambda: done.append(2))  # waits for the first before it starts
    assert done[0] == 1
    writer.wait()
    assert done == [1, 2]


def test_a_failed_write_is_raised_to_the_training_thread_once() -> None:
    writer = SnapshotWriter()
    writer.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        writer.wait()
    writer.wait()  # nothing in flight, nothing failed since
