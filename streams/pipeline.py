"""What the live detector does with one Kafka message or one tick, whatever reads the topics: validate,
feed `LiveDetector`, turn its decisions into messages; never raises on input, wall time passed in
(docs/streams.md, "Two engines, one pipeline").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from msgspec.structs import replace

from trainmedic.bus._tagcheck import first as first_tag
from trainmedic.bus.message import RawMessage, parse_message
from trainmedic.bus.metrics import DEAD_LETTERS
from trainmedic.bus.telemetry_keys import Verifier
from trainmedic.schemas import DeadLettered, Incident, InvalidEvent, Topics, encode
from trainmedic.schemas.wire import decode_telemetry, fast_decoder, retimed
from trainmedic.streams import metrics
from trainmedic.streams.event_time import ClockBound, Skewed
from trainmedic.streams.live import LiveConfig, LiveDetector

log = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]] | None  # a Kafka message's headers, as the client gives them


@dataclass(frozen=True, slots=True)
class Output:
    """One message the detector sends."""

    topic: str
    key: bytes
    value: bytes


@dataclass
class DetectorStats:
    """What the running detector has done, for logs and metrics."""

    events: int = 0
    dead_lettered: int = 0
    incidents: int = 0


@dataclass
class Pipeline:
    """Telemetry messages and ticks in, `Output`s out."""

    topics: Topics
    live: LiveDetector | None  # None: validation only (`check`), as the ingest stage uses it
    stats: DetectorStats = field(default_factory=DetectorStats)
    max_skew_s: float | None = None  # the clock bounds (None: the live detector's, or the defaults)
    max_ahead_s: float | None = None
    verifier: Verifier | None = None  # each record's MAC checked against its node's key; None: none
    bound: ClockBound = field(init=False)
    _counted: int = 0  # events already added to the metric
    _warned: dict[str, float] = field(default_factory=dict)  # node -> when its last refusal was logged

    def __post_init__(self) -> None:
        DEAD_LETTERS.labels("detector")  # at 0 from the start: no dead letters shows as 0, not as nothing
        bound = ClockBound.of(self.live.config if self.live is not None else LiveConfig())
        self.bound = ClockBound(bound.ahead_s if self.max_ahead_s is None else self.max_ahead_s,
                                bound.behind_s if self.max_skew_s is None else self.max_skew_s)

    def on_message(self, message: RawMessage, wall: float, headers: Headers = None) -> list[Output]:
        return self.on_messages([message], wall, [headers])

    def on_messages(self, messages: list[RawMessage], wall: float,
                    headers: list[Headers] | None = None) -> list[Output]:
        """Messages read together at `wall`, in the order read (with their Kafka headers, where the
        records' MACs are checked): each validated (`check`), and each partition's runs of events fed to
        the live detector together (`on_runs`)."""
        out: list[Output] = []
        check, runs, run, topic, partition = self.check, [], None, None, None
        for i, message in enumerate(messages):
            event, message, dead = check(message, wall, None if headers is None else headers[i])
            if dead:
                out += dead
            if event is None:
                continue
            if message.partition != partition or message.topic != topic:
                topic, partition, run = message.topic, message.partition, []
                runs.append(((topic, partition), run))
            run.append((event.ts, event, message))
        if runs:
            out += self.on_runs(runs, wall)
        return out

    def on_fetch(self, messages: list, wall: float, offsets: dict[tuple[str, int], int],
                 on_error: Callable[[object], None]) -> list[Output]:
        """`on_messages` for a fetch as confluent_kafka gives it (the consumer engine), in one pass:
        each partition's next offset set in `offsets`, a consumer error passed to `on_error`. The
        common message (ASCII JSON the fast decoder takes, an ASCII key, its clock within bounds:
        `ClockBound.within`, inlined) is taken here; any other goes through `check`, which gives the
        reason. (`RawMessage.of`, then `check`, per message cost about 0.4 µs an event more:
        docs/streams.md, "A leaner hot path".) With a verifier, the record's MAC is checked here too, in
        one call (`_tagcheck.first`: its first header, its node's key once known); `check` takes any
        other."""
        out: list[Output] = []
        runs: list = []
        run: list = []
        topic = partition = last = None
        decode, check, valid, verifier = fast_decoder.decode, self.check, 0, self.verifier
        keys = {} if verifier is None else verifier.keys
        ahead, behind = self.bound.ahead_s, -self.bound.behind_s
        latest = wall + ahead
        for msg in messages:
            err = msg.error()
            if err is not None:
                on_error(err)
                continue
            t, p, value, key = msg.topic(), msg.partition(), msg.value(), msg.key()
            if p != partition or t != topic:
                if last is not None:
                    offsets[(topic, partition)] = last + 1
                topic, partition, run = t, p, []
                runs.append(((t, p), run))
            last = msg.offset()
            stamp = msg.timestamp()[1]
            message = RawMessage(t, p, last, stamp, key, value)
            event = None
            if value is not None and value.isascii() and (key is None or key.isascii()):
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per event)
                    event = decode(value)
                except Exception:  # check gives the reason
                    pass
            if (verifier is not None and event is not None
                    and not first_tag(keys, event.node, value, msg.headers())):
                event = None  # check verifies it (a node's first record) or gives the reason
            if (event is None or event.ts > latest
                    or (stamp > 0 and not behind <= event.ts - stamp / 1000 <= ahead)):
                event, message, dead = check(message, wall, msg.headers())
                if dead:
                    out += dead
                if event is None:
                    continue
            else:
                valid += 1
            run.append((event.ts, event, message))
        if last is not None:
            offsets[(topic, partition)] = last + 1
        self.stats.events += valid
        runs = [entry for entry in runs if entry[1]]  # a partition whose messages were all dead letters
        if runs:
            out += self.on_runs(runs, wall)
        return out

    def check(self, message: RawMessage, wall: float,
              headers: Headers = None) -> tuple[object | None, RawMessage, list[Output]]:
        """Validate one message: (the event to use or None, its message as the event is used, dead
        letters). A record not written by the node it names is refused (`Verifier`); an event whose
        clock is out of bounds is refused, or used at its message's timestamp (`ClockBound.judge`)."""
        try:
            event = decode_telemetry(message.value)
            if message.key is not None:
                message.key.decode()  # a key must be UTF-8 (trainmedic.bus.message.parse_message)
        except (InvalidEvent, UnicodeDecodeError):
            return None, message, self._dead_letter(message, wall)
        verifier = self.verifier
        if verifier is not None and not first_tag(verifier.keys, event.node, message.value, headers):
            reason = verifier.refused(message.value, event.node, headers)  # a node's first record, or why
            if reason is not None:
                return None, message, self._unverified(message, event, reason, wall)
        self.stats.events += 1
        skewed = self.bound.judge(event.ts, message.timestamp_ms / 1000, wall)
        if skewed is not None:
            event, out = self._skewed(message, event, skewed, wall)
            if event is None:
                return None, message, out
            # the origin carries the event as fed, so a checkpoint restores it at its stamp too
            return event, replace(message, value=encode(event)), out
        return event, message, []

    def on_runs(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> list[Output]:
        """Valid events read together: per partition, (ts, event, origin) in arrival order (from
        `check`, or from the ingest stage: streams/engines/decide_stage.py)."""
        found = self.live.feed_many(runs, wall)
        out = self._publish(found) if found else []
        if self.live.failed:
            out += self._failures(wall)
        return out

    def _dead_letter(self, message: RawMessage, wall: float) -> list[Output]:
        """An invalid message, to the dlq with the reason `parse_message` gives."""
        topic = message.topic
        letter = parse_message(self.topics, topic, message.partition, message.offset, message.key,
                               message.value, wall, decode_telemetry)
        self.stats.dead_lettered += 1
        DEAD_LETTERS.labels("detector").inc()
        log.warning("dead-lettered %s[%d]@%d: %s", topic, message.partition, message.offset, letter.reason)
        return [Output(self.topics.dlq, topic.encode(), encode(letter))]

    def _unverified(self, message: RawMessage, event, reason: str, wall: float) -> list[Output]:
        """A record about a node that node did not write (or wrote without its key): never used."""
        metrics.UNVERIFIED.inc()
        self.stats.dead_lettered += 1
        DEAD_LETTERS.labels("detector").inc()
        log.warning("refused %s[%d]@%d node=%s: %s", message.topic, message.partition, message.offset,
                    event.node, reason)
        letter = DeadLettered.of(ts=wall, reason=reason, topic=message.topic, partition=message.partition,
                                 offset=message.offset, key=message.key, value=message.value)
        return [Output(self.topics.dlq, message.topic.encode(), encode(letter))]

    def on_tick(self, wall: float) -> list[Output]:
        """Time passed with no event: release what is due, fire deadlines. Also brings the events
        counter up to date (a Prometheus counter per event costs more than the event's rules)."""
        metrics.DETECTOR_EVENTS.inc(self.stats.events - self._counted)
        self._counted = self.stats.events
        return self._publish(self.live.tick(wall)) + self._failures(wall)

    def _skewed(self, message: RawMessage, event, skewed: Skewed, wall: float) -> tuple[object, list[Output]]:
        """An event whose own clock is out of bounds: its ts never enters event time. The message
        goes to the dlq with the reason; the event is None (refused: ahead of the broker's stamp or
        of the wall clock) or used at its message's stamp (far behind it: a node with a slow clock
        still counts as alive)."""
        metrics.CLOCK_SKEWED.labels(skewed.direction).inc()
        self.stats.dead_lettered += 1
        DEAD_LETTERS.labels("detector").inc()
        log.warning("clock skew %s[%d]@%d node=%s: %s", message.topic, message.partition, message.offset,
                    getattr(event, "node", None), skewed.reason)
        letter = DeadLettered.of(ts=wall, reason=skewed.reason, topic=message.topic,
                                 partition=message.partition, offset=message.offset, key=message.key,
                                 value=message.value)
        return (None if skewed.used_at is None else retimed(event, skewed.used_at),
                [Output(self.topics.dlq, message.topic.encode(), encode(letter))])

    def _warn(self, node: str, wall: float) -> bool:
        """Whether to log a refusal of `node`'s: once a minute per node at most (a flood is the dlq's)."""
        if wall - self._warned.get(node, float("-inf")) < 60.0:
            return False
        if len(self._warned) >= 65_536:
            self._warned.clear()
        self._warned[node] = wall
        return True

    def _failures(self, wall: float) -> list[Output]:
        """Events the core raised on (a bug, logged by LiveDetector) or refused as unplaced (logged
        here): kept on the dlq as they came (one fed without its message, re-encoded, from topic ""
        at offset -1)."""
        out = []
        for failure in self.live.take_failures():
            origin = failure.origin or RawMessage("", -1, -1, -1, None, None)
            value = encode(failure.event) if origin.value is None else origin.value
            self.stats.dead_lettered += 1
            DEAD_LETTERS.labels("detector").inc()
            if failure.refused and self._warn(getattr(failure.event, "node", ""), wall):
                log.warning("refused %s[%d]@%d: %s (the node's next refusals this minute: the dlq only)",
                            origin.topic, origin.partition, origin.offset, failure.error)
            out.append(Output(self.topics.dlq, origin.topic.encode(), encode(DeadLettered.of(
                ts=wall, reason=failure.error if failure.refused else
                f"detector error ({failure.error}; see the detector's log)",
                topic=origin.topic, partition=origin.partition, offset=origin.offset, key=origin.key,
                value=value))))
        return out

    def _publish(self, incidents: list[Incident]) -> list[Output]:
        out = []
        for incident in incidents:
            self.stats.incidents += 1
            metrics.observe_incident(incident)
            log.info("incident %s %s %s %s job=%s node=%s delay=%.2fs", incident.status, incident.id,
                     incident.category, incident.severity, incident.job, incident.node,
                     incident.ts - incident.first_ts)
            key = (incident.job or incident.node or incident.id).encode()
            out.append(Output(self.topics.incidents, key, encode(incident)))
        return out
