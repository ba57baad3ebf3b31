"""A detector worker of bench/detector_live.py seen from the bench: its process, the reports it
prints, and the CPU time it and its children have used (read from /proc)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

from harness.detector_workers import WORKER_COMMAND
from trainmedic.bus.settings import KafkaSettings

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children(pid: int) -> list[int]:
    """The running child processes of `pid`."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


class Worker:
    """`python bench/detector_live.py --worker MODE APP_ID`: a detector of one engine (or, with
    `noop`, a Faust agent that only counts) plus a twice-a-second report on stdout (the event
    loop it runs on included; `detector_workers.report`), read here as it comes."""

    def __init__(self, settings: KafkaSettings, run: str, home: Path, mode: str, *,
                 settle: bool = False) -> None:
        env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": settings.bootstrap,
               "TRAINMEDIC_TOPIC_PREFIX": settings.topic_prefix, "TRAINMEDIC_HOME": str(home),
               "BENCH_SETTLE": "1" if settle else ""}
        self.log = home / f"{run}-{mode}.log"
        self.proc = subprocess.Popen([*WORKER_COMMAND, mode, f"{run}-{mode}"], env=env,
                                     stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True)
        self.reports: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):  # Faust may print too
                self.reports.append(json.loads(line))

    def wait(self, until, give_up_s: float = 300.0) -> dict:
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            if self.reports and until(self.reports[-1]):
                return self.reports[-1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"worker gave up; its log:\n{self.log.read_text()[-3000:]}")

    def cpu_s(self) -> float:
        """The worker's CPU seconds so far, and its children's (a sharded detector's ingest instances)."""
        return cpu_s(self.proc.pid) + sum(cpu_s(child) for child in children(self.proc.pid))

    def own_cpu_s(self) -> float:
        return cpu_s(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
