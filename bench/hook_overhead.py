"""The training hook's overhead on a ~50 ms training step, measured side by side in one run.

Steps with and without the hook alternate (so drift of a shared machine hits both alike);
each step is a fixed amount of work, timed together with the `hook.step` call after it.
The hook reports as a rank does, over a Unix socket to its executor's report server
(recovery/executor/report_server.py), which runs in a process of its own as the executor's
would, checks every report and counts what it would publish (Kafka is the executor's cost,
not the step's).

    .venv/bin/python bench/hook_overhead.py [--steps 60] [--step-ms 50] [--work python|torch]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from trainmedic.runtime.hook import Hook, HookConfig


def python_work(iterations: int) -> Callable[[], None]:
    """Pure-Python arithmetic: holds the GIL all step long, the worst case for the hook's thread."""
    def work() -> None:
        total = 0
        for i in range(iterations):
            total += i * i
    return work


def torch_work(size: int) -> Callable[[], None]:
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    return lambda: torch.mm(a, b)


def calibrate(
    make: Callable[[int], Callable[[], None]], size: int, step_s: float, exponent: float,
) -> Callable[[], None]:
    """A work function of about `step_s`: its cost grows as size ** exponent."""
    for _ in range(4):
        work = make(size)
        t0 = time.perf_counter()
        work()
        took = time.perf_counter() - t0
        size = max(1, int(size * (step_s / took) ** (1 / exponent)))
    return make(size)


def serve(path: str, rank_pid: int) -> None:
    """The executor's side: take the rank's reports until stdin closes, then print how many passed."""
    from trainmedic.recovery.executor.core.reports import LaunchedRank, ReportLimits
    from trainmedic.recovery.executor.report_server import ReportServer

    published = [0]

    def count(_report: object) -> None:
        published[0] += 1

    launched = {rank_pid: LaunchedRank("bench", 0, 0, 1, 0)}
    server = ReportServer(Path(path), node="bench", resolve=launched.get, publish=count,
                          limits=ReportLimits(rate_per_s=1e9, burst=10**9, bytes_per_s=1e12,
                                              byte_burst=10**12))  # count every one
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    time.sleep(0.5)  # what is still in the socket
    server.close()
    print(published[0], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100, help="steps with, and as many without, the hook")
    parser.add_argument("--step-ms", type=float, default=50.0)
    parser.add_argument("--work", choices=("python", "torch"), default="python")
    parser.add_argument("--serve", nargs=2, metavar=("SOCKET", "PID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return

    path = os.path.join(tempfile.mkdtemp(prefix="tm-bench-"), "reports", "r.sock")
    executor = subprocess.Popen([sys.executable, __file__, "--serve", path, str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert executor.stdout.readline().strip() == "ready"
    env = {**os.environ, "TRAINMEDIC_JOB": "bench", "TRAINMEDIC_NODE": "bench", "RANK": "0",
           "WORLD_SIZE": "1", "TRAINMEDIC_REPORT_SOCKET": path}
    step_s = args.step_ms / 1000
    if args.work == "torch":
        work = calibrate(torch_work, 256, step_s, exponent=3.0)
    else:
        work = calibrate(python_work, 100_000, step_s, exponent=1.0)

    hook = Hook.from_env(env, config=HookConfig(queue_size=100_000))
    hook.started()
    plain: list[float] = []
    hooked: list[float] = []
    for i in range(args.steps):
        for with_hook in ((False, True) if i % 2 else (True, False)):
            t0 = time.perf_counter()
            work()
            if with_hook:
                hook.step(i, time.perf_counter() - t0)
            took = time.perf_counter() - t0
            (hooked if with_hook else plain).append(took)

    calls = 20_000
    t0 = time.perf_counter()
    for i in range(args.steps, args.steps + calls):  # steps go on: the executor refuses one going back
        hook.step(i, 0.05)
    per_call_us = (time.perf_counter() - t0) / calls * 1e6
    hook.close(10.0)
    received, _ = executor.communicate("", timeout=60)

    mean_plain, mean_hooked = statistics.fmean(plain), statistics.fmean(hooked)
    # Adjacent steps share the machine's load of the moment: their difference cancels most of it.
    paired = statistics.median(h - p for h, p in zip(hooked, plain, strict=True))
    print(f"hook -> executor socket; work: {args.work}; {args.steps} steps with and {args.steps} without")
    print(f"mean step time without hook: {mean_plain * 1e3:.3f} ms")
    print(f"mean step time with hook:    {mean_hooked * 1e3:.3f} ms "
          f"({(mean_hooked / mean_plain - 1) * 100:+.3f} %)")
    print(f"median paired difference:    {paired * 1e6:+.1f} us per step "
          f"({paired / mean_plain * 100:+.3f} % of a step; target < 1 %)")
    print(f"hook.step() per call:   {per_call_us:.2f} us ({calls} calls in a tight loop)")
    print(f"events dropped:         {hook.dropped} of {args.steps + calls + 1}; "
          f"the executor's side let {received.strip()} through")


if __name__ == "__main__":
    main()
