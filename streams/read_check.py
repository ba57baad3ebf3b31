"""Whether a detector has read everything there is, which is what lets event time follow the wall
clock (`LiveDetector.caught_up`, "blind is not dead"): both engines ask the broker for the end
offsets of the partitions they read and compare them with what they have read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from trainmedic.bus import clients
from trainmedic.bus.settings import KafkaSettings

# Failed end-offset requests in a row after which the admin client is made anew: at the first. A
# client that asked a broker now gone keeps asking it until renewed (its partitions' new leaders
# unknown to it): with 3, a member of a three-broker cluster killed blinded the detector for 3 x
# TIMEOUT_S = 15 s, though every partition had a leader again within seconds (docs/deployment.md,
# fault (e)).
RENEW_AFTER = 1
EVERY_S = 0.25  # how often to ask for the end offsets
TIMEOUT_S = 5.0  # how long one request may take
MAX_ANSWERS = 64  # answers kept until reads reach them (16 s of them at EVERY_S; then fewer per second)


class ReadCheck:
    """Whether the detector has read everything there is: it asks the broker for the telemetry
    partitions' end offsets (one ListOffsets request, answered in the background) and, once the
    offsets read reach them, reads were complete as of when it asked. No answer (broker down or
    frozen, a request that failed) or offsets short of the ends (fetches failing, a backlog after
    a restart or a pause) confirms nothing: `LiveDetector` then does not let the wall clock
    become event time. Only an answer about every partition whose reads are checked now confirms,
    for those (the consumer engine checks the partitions it reads, and asks about the paused ones
    too; partitions are added)."""

    def __init__(self, settings: KafkaSettings, every_s: float = EVERY_S,
                 timeout_s: float = TIMEOUT_S) -> None:
        self._settings = settings
        self._admin = clients.admin(settings)
        self.every_s, self.timeout_s = every_s, timeout_s
        self._streak = 0  # failed requests in a row
        self.error: str | None = None  # the last failure
        self._asked_at = float("-inf")  # wall time of the request in flight (or the last one)
        self._futures: dict | None = None
        self._answers: list[tuple[float, dict[tuple[str, int], int]]] = []  # (asked at, ends) not reached
        self.failures = 0

    def poll(self, offsets: Mapping[tuple[str, int], int], wall: float,
             about: Iterable | None = None) -> float | None:
        """The wall time up to which the reads of `offsets`' partitions are now known complete, if
        newly known; else None. Asks about `about` (by default the same partitions): a consumer
        engine asks about those it paused too, so that what it asked while they were paused still
        covers them once it reads them again (dropped, a detector far behind went unconfirmed for
        as long as the pause: a false blind spell)."""
        if self._futures is not None and all(f.done() for f in self._futures.values()):
            try:
                ends = {(tp.topic, tp.partition): f.result().offset for tp, f in self._futures.items()}
                if min(ends.values(), default=0) < 0:  # what a request that timed out answers
                    raise KafkaException(RdKafkaError(RdKafkaError._TIMED_OUT, "no end offsets in time"))
                self._answers.append((self._asked_at, ends))
                if len(self._answers) > MAX_ANSWERS:
                    self._thin()
                self._streak, self.error = 0, None
            except KafkaException as err:
                self.failures += 1
                self._streak += 1
                self.error = err.args[0].str()
                if self._streak % RENEW_AFTER == 0:
                    # librdkafka's admin client can keep a restarted broker's old leader epoch
                    # (FENCED_LEADER_EPOCH on every request): a new client asks afresh.
                    self._admin = clients.admin(self._settings)
            self._futures = None
        # Every answer is kept until the reads reach it, and the newest reached confirms: a detector
        # reading a second behind is confirmed a second late. (Only the newest kept, each a target
        # further on, it was never confirmed at all: it counted as blind.) Ends only grow, so the
        # first not reached stops the look. An answer that leaves out a partition asked about now is
        # dropped; one about a partition not asked about now (paused since) confirms the others.
        # (Only an answer about exactly those asked about now confirming, a consumer engine that
        # paused and resumed partitions every few fetches under load was confirmed seconds apart:
        # a false blind spell, and event time stood still for `rejoin_s`.)
        confirmed = None
        if offsets:  # about no partition, nothing is confirmed
            answers = [(at, ends) for at, ends in self._answers if offsets.keys() <= ends.keys()]
            reached = 0
            while reached < len(answers) and all(offsets[tp] >= answers[reached][1][tp] for tp in offsets):
                reached += 1
            if reached:
                confirmed = answers[reached - 1][0]
            self._answers = answers[reached:]
        asked = list(offsets if about is None else about)
        if self._futures is None and wall - self._asked_at >= self.every_s and asked:
            self._asked_at = wall
            self._futures = self._admin.list_offsets(
                {TopicPartition(t, p): OffsetSpec.latest() for t, p in asked},
                request_timeout=self.timeout_s)
        return confirmed

    def _thin(self) -> None:
        """One answer fewer: the one whose neighbours are closest in time, so that those kept span
        the lag evenly and a detector far behind is still confirmed every lag / MAX_ANSWERS. (The
        oldest dropped, one more than 16 s behind was never confirmed: it counted as blind.)"""
        answers = self._answers
        gone = min(range(1, len(answers) - 1), key=lambda i: answers[i + 1][0] - answers[i - 1][0])
        del answers[gone]
