"""librdkafka's lines, one per condition with a count (bus/log_repeats.py)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

from trainmedic.bus.log_repeats import SUMMARY, Repeats, condition

REFUSED = ("FAIL [rdkafka#producer-{n}] [thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to "
           "ipv4#127.0.0.1:9 failed: Connection refused (after {ms}ms in state CONNECT)")


def record(message: str, name: str = "trainmedic.bus.clients", level: int = logging.ERROR,
           **extra: object) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_condition_shows_once_a_window_with_how_many_it_held() -> None:
    clock = Clock()
    repeats = Repeats(window_s=10.0, clock=clock)
    shown = []
    for n in range(600):  # 30 s of a try every 50 ms, as against a broker that is not there
        clock.now = 100.0 + n * 0.05
        line = record(REFUSED.format(n=1 + n % 3, ms=n % 7))
        if repeats.filter(line):
            shown.append(line.getMessage())
    assert len(shown) == 3, shown
    assert shown[0] == REFUSED.format(n=1, ms=0)
    assert shown[1].endswith("(and 199 more like it in the last 10 s)"), shown[1]
    assert shown[2].endswith("(and 199 more like it in the last 10 s)"), shown[2]
    # the last window's: its first line (try 400: client 2, 1 ms) and the 199 held after it
    assert repeats.summary() == [("trainmedic.bus.clients", logging.ERROR,
                                  REFUSED.format(n=2, ms=1) + " (and 199 more like it in the last 10 s)")]
    assert repeats.summary() == []  # counted once


def test_other_conditions_loggers_levels_and_lines_pass_on_their_own() -> None:
    repeats = Repeats(clock=Clock())
    other_broker = REFUSED.format(n=1, ms=0).replace("127.0.0.1:9", "127.0.0.1:19092")
    assert repeats.filter(record(REFUSED.format(n=1, ms=0)))
    assert repeats.filter(record(other_broker))
    assert repeats.filter(record(REFUSED.format(n=1, ms=0), name="trainmedic.bus.consumer"))
    assert repeats.filter(record(REFUSED.format(n=1, ms=0), level=logging.WARNING))
    assert not repeats.filter(record(REFUSED.format(n=2, ms=5)))
    for _ in range(3):  # not librdkafka's: never held
        assert repeats.filter(record("refused command c1: not signed"))
    assert repeats.filter(record(REFUSED.format(n=1, ms=0) + " (and 1 more like it in the last 3 s)",
                                 **{SUMMARY: True}))


def test_a_line_is_one_condition_whatever_its_client_number_or_times() -> None:
    assert condition(REFUSED.format(n=1, ms=0)) == condition(REFUSED.format(n=17, ms=3021))
    assert condition("ERROR [rdkafka#consumer-2] [thrd:x]: x: Disconnected (after 1234ms in state UP, "
                     "3 identical error(s) suppressed)") == condition(
        "ERROR [rdkafka#consumer-9] [thrd:x]: x: Disconnected (after 5ms in state UP)")


def test_a_client_that_finds_no_broker_says_so_in_two_lines_not_one_a_try() -> None:
    """A real librdkafka client, 3 s against a loopback port no broker listens on (port 9: discard,
    refused here): it tries about 20 times a second, every try a line before. The tries it makes
    between the error and its end are not counted again."""
    script = ("import time\n"
              "from trainmedic.bus.admin import describe_topics\n"
              "from trainmedic.bus.settings import KafkaSettings\n"
              "from trainmedic.common.errors import KafkaError\n"
              "settings = KafkaSettings.from_env(role='admin', bootstrap='127.0.0.1:9', topic_prefix='x.')\n"
              "try:\n"
              "    describe_topics(settings, timeout_s=3)\n"
              "except KafkaError as err:\n"
              "    time.sleep(1)  # the client is still alive, and tries again\n"
              "    print('ERROR', err, flush=True)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMEDIC_")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if "Connection refused" in line]
    assert len(lines) == 2, done.stderr
    held = re.search(r"\(and (\d+) more like it\)$", lines[1])
    assert held and int(held[1]) >= 10, lines
    assert done.stdout.startswith("ERROR no Kafka broker answered at 127.0.0.1:9"), done.stdout
