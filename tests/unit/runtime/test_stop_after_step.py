"""A SIGTERM while a rank finishes a step waits for the step's snapshot; anywhere else it ends the
rank at once. Real processes and real signals: the runtime's handlers, not a stand-in."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

RANK = textwrap.dedent("""
    import signal, sys, time
    from trainmedic.runtime.env import WorkerEnv
    from trainmedic.runtime.rank import Runtime
    from trainmedic.schemas import RestoreSource

    rt = Runtime(WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                           local_world_size=1, job="j", node="n", generation=0, restore=RestoreSource()))
    rt.install_signal_handlers()
    if sys.argv[1] == "finishing":
        with rt.finishing_step():
            print("ready", flush=True)
            time.sleep(1.5)  # the SIGTERM lands here
            print("snapshot saved", flush=True)
    else:
        print("ready", flush=True)
        time.sleep(1.5)  # in a collective, or hung: the SIGTERM lands here
        print("snapshot saved", flush=True)
    print("next step", flush=True)
""")


def _stop_during(where: str) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-c", RANK, where], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out


def test_a_sigterm_while_finishing_a_step_waits_for_its_snapshot_then_ends_the_rank():
    code, out = _stop_during("finishing")
    assert out == "snapshot saved\n"
    assert code == -signal.SIGTERM


def test_a_sigterm_outside_a_finishing_step_ends_the_rank_at_once():
    code, out = _stop_during("collective")
    assert out == ""
    assert code == -signal.SIGTERM


def test_outside_a_finishing_step_sigterm_keeps_the_kernel_default():
    """A Python handler runs only between bytecodes: a rank blocked in a collective's C code would
    not die until the collective timed out. So the handler is there only while finishing a step."""
    from trainmedic.runtime.env import WorkerEnv
    from trainmedic.runtime.rank import Runtime
    from trainmedic.schemas import RestoreSource

    rt = Runtime(WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                           local_world_size=1, job="j", node="n", generation=0, restore=RestoreSource()))
    before = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        rt.install_signal_handlers()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        with rt.finishing_step():
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, before)
