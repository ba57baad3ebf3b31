"""The alert bridge's Kafka adapter: consume incidents in a group, deliver, then commit.

Incidents come from two topics: the detector's (`incidents`) and the coordinator's own
escalations (`recovery`, which also carries its plans and outcomes: nothing to alert on).

Thin: routing, payloads, queues and offsets are the pure modules'. This file moves messages
from Kafka into the DeliveryBook, POSTs what is due, publishes an audit record per outcome
to the alerts topic, re-posts open alerts to Alertmanager, and stores an offset only when
every delivery of its message and of all earlier messages of its partition is done.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from trainmedic.bus import clients
from trainmedic.bus import metrics as bus_metrics
from trainmedic.bus.message import RawMessage, parse_message
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.ops.alerts import metrics, payloads
from trainmedic.ops.alerts.config import AlertBridgeConfig
from trainmedic.ops.alerts.delivery import Delivery, DeliveryBook
from trainmedic.ops.alerts.http import Outcome, Result, post_json
from trainmedic.ops.alerts.limits import PostLimiter
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.views import views
from trainmedic.schemas import AlertDelivered, DeadLettered, Incident, IncidentStatus

log = logging.getLogger("trainmedic.alerts")

Post = Callable[[str, Any, float], Result]
MAX_ATTEMPTS_PER_STEP = 200  # so that a long backlog never keeps the consumer from polling


def incident_topics(settings: KafkaSettings) -> list[str]:
    """Where incidents are: the detector's, and the coordinator's escalations on its recovery log."""
    return [settings.topics.incidents, settings.topics.recovery]


class AlertBridge:
    """`start()` learns the open incidents from the whole log and joins the group; `step()` does one round."""

    def __init__(self, settings: KafkaSettings, config: AlertBridgeConfig, *, post: Post = post_json,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.config = config
        self.book = DeliveryBook(list(config.sinks()), config.retry, config.backlog_max)
        self.open: dict[str, Incident] = {}
        self.limits = PostLimiter(config.limits)
        self._post = post
        self._clock = clock
        self._producer = EventProducer(settings, client_id=settings.topics.owned("alerts"))
        self._consumer: Consumer | None = None
        self._stored: dict[tuple[str, int], int] = {}
        self._paused = False
        self._next_refresh = 0.0

    def start(self, timeout_s: float = 30.0) -> None:
        topics = incident_topics(self.settings)
        log_state = IncidentHistory()
        with TopicReader(self.settings, topics, validate=True, name=self.settings.topics.owned("alerts"),
                         timeout_s=timeout_s) as reader:
            for batch in reader.batches():
                for item in batch:
                    if not isinstance(item, DeadLettered):
                        apply(log_state, item.event)  # a pure fold of valid events: it does not raise
        self.open = {v.id: v.incident for v in views(log_state) if v.status == "open"}
        self._consumer = clients.consumer(self.settings, {
            "group.id": self.config.group_id, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "enable.auto.offset.store": False,
        }, logger=log)
        self._consumer.subscribe(topics)
        # Every sink's counters from the start at 0: a panel shows "none" rather than no data, and a
        # first retry counts as an increase for the rules (a series born at 1 has no rate).
        for sink in self.book.queues:
            for counter in (metrics.ALERTS_DELIVERED, metrics.ALERTS_REJECTED, metrics.ALERT_RETRIES):
                counter.labels(sink)
        for scope in ("node", "job"):
            metrics.ALERTS_HELD.labels(scope)
        bus_metrics.DEAD_LETTERS.labels("alerts")
        log.info("alert bridge on %s (group %s): sinks %s; %d incidents open in the log",
                 " and ".join(topics), self.config.group_id, ", ".join(f"{name} {'/'.join(s.severities)}"
                                                for name, s in self.config.sinks().items()), len(self.open))

    def step(self, timeout_s: float = 1.0) -> None:
        """Take what arrives within `timeout_s` (unless the backlog is full), deliver what is due, commit."""
        self._flow_control()
        for msg in self._consumer.consume(100, timeout_s):
            self._take(msg)
        self.summarize()
        self._deliver()
        self._refresh()
        self._commit()
        self._report()

    def _flow_control(self) -> None:
        assigned = self._consumer.assignment()
        if self.book.full:
            if assigned:
                self._consumer.pause(assigned)
            if not self._paused:
                log.warning("alert backlog full (%s): consumption paused until sinks catch up",
                            self._backlog())
            self._paused = True
        elif self._paused:
            if assigned:
                self._consumer.resume(assigned)
            self._paused = False
            log.info("alert backlog below %d again: consumption resumed", self.config.backlog_max)

    def _take(self, msg) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise KafkaError(f"alert bridge consumer failed: {err.str()}", code=err.name())
            if err.code() != RdKafkaError._PARTITION_EOF:
                log.warning("consumer: %s (retrying)", err.str())
            return
        letter = self.admit(RawMessage.of(msg))
        if letter is not None:
            bus_metrics.DEAD_LETTERS.labels("alerts").inc()
            log.warning("dead-lettered %s[%d]@%d: %s", letter.source_topic, letter.partition, letter.offset,
                        letter.reason)
            self._producer.send(self.settings.topics.dlq, letter, key=letter.source_topic)

    def admit(self, msg: RawMessage) -> DeadLettered | None:
        """Queue one message's deliveries; a value that does not validate, or whose payloads cannot be
        built, is returned as a dead letter instead (and its offset still moves on)."""
        position = (msg.topic, msg.partition, msg.offset)
        parsed = parse_message(self.settings.topics, *position, msg.key, msg.value, self._clock())
        if not isinstance(parsed, DeadLettered) and isinstance(parsed.event, Incident):
            incident, sinks = parsed.event, payloads.route(parsed.event, self.config)
            try:
                for sink in sinks:  # built now, so that a payload that cannot be built is never queued
                    self._request(sink, [incident], self._clock())
            except Exception as err:
                parsed = parsed.rejected(f"alert payload cannot be built: {type(err).__name__}: {err}",
                                         self._clock())
        if isinstance(parsed, DeadLettered) or not isinstance(parsed.event, Incident):
            self.book.admit(None, position, [])  # a lifecycle event: nothing to alert on
            return parsed if isinstance(parsed, DeadLettered) else None
        if incident.status is IncidentStatus.OPEN:
            self.open[incident.id] = incident
        else:
            self.open.pop(incident.id, None)
        # the coordinator's own escalations (on `recovery`) are never held; the rest past its node's or
        # job's posts in the window are, and a summary tells (limits.py)
        held = self.limits.admit(incident, self._clock(), trusted=msg.topic == self.settings.topics.recovery)
        if held is not None:
            metrics.ALERTS_HELD.labels(held).inc()
            sinks = []
        self.book.admit(incident, position, sinks)
        return None

    def summarize(self) -> None:
        """Queue one summary per node or job whose window is over and held incidents back, and the
        resolution of each summary posted a window ago."""
        for summary in self.limits.due(self._clock()):
            if summary.status is IncidentStatus.OPEN:
                log.warning("%s", summary.evidence[0])
            self.book.admit(summary, None, payloads.route(summary, self.config))

    def _deliver(self) -> None:
        for _ in range(MAX_ATTEMPTS_PER_STEP):
            due = self.book.due(self._clock())
            if not due:
                return
            for sink, delivery in due:
                self._attempt(sink, delivery)

    def _attempt(self, sink: str, delivery: Delivery) -> None:
        incident, now = delivery.incident, self._clock()
        url, body = self._request(sink, [incident], now)
        result = self._post(url, body, self.config.timeout_s)
        what = f"{sink}: {'resolve' if incident.status is IncidentStatus.RESOLVED else 'trigger'} " \
               f"{incident.severity} {incident.category} {incident.id}"
        if result.outcome is Outcome.RETRY:
            wait = self.book.failed(sink, now)
            metrics.ALERT_RETRIES.labels(sink).inc()
            log.warning("%s failed (attempt %d: %s); retry in %.1fs; backlog %s", what, delivery.attempts,
                        result.detail, wait, self._backlog())
            return
        self.book.done(sink)
        attempts = delivery.attempts + 1
        if result.outcome is Outcome.DELIVERED:
            metrics.ALERTS_DELIVERED.labels(sink).inc()
            log.info("%s delivered (attempt %d)", what, attempts)
        else:
            metrics.ALERTS_REJECTED.labels(sink).inc()
            log.error("%s REJECTED by the endpoint, not retried: %s", what, result.detail)
        record = AlertDelivered(ts=now, incident_id=incident.id, status=incident.status,
                                severity=incident.severity, sink=sink, outcome=str(result.outcome),
                                attempts=attempts,
                                detail=None if result.outcome is Outcome.DELIVERED else result.detail,
                                payload=_without_secrets(body))
        self._producer.send(self.settings.topics.alerts, record, key=incident.id)

    def _request(self, sink: str, incidents: list[Incident], now: float) -> tuple[str, Any]:
        """URL and body for `sink`; Alertmanager takes a list, the others one incident."""
        cfg = self.config
        if sink == "alertmanager":
            am = cfg.alertmanager
            return (am.url.rstrip("/") + "/api/v2/alerts",
                    [payloads.alertmanager_alert(i, now, am.resend_s, cfg.generator_url) for i in incidents])
        if sink == "pagerduty":
            key = cfg.pagerduty.routing_key.get_secret_value()
            return cfg.pagerduty.url, payloads.pagerduty_event(incidents[0], key)
        return cfg.webhook.url.get_secret_value(), payloads.webhook_message(incidents[0])

    def _refresh(self) -> None:
        """Re-post every open alert to Alertmanager, which forgets alerts that are not re-posted."""
        am, now = self.config.alertmanager, self._clock()
        if am is None or now < self._next_refresh:
            return
        self._next_refresh = now + am.resend_s
        routed = [i for i in self.open.values()
                  if i.severity in am.severities and not self.limits.holds(i.id)]
        if not routed or self.book.backlog("alertmanager"):
            return  # queued deliveries go first; the next refresh covers the rest
        url, body = self._request("alertmanager", routed, now)
        result = self._post(url, body, self.config.timeout_s)
        if result.outcome is not Outcome.DELIVERED:
            metrics.ALERT_RETRIES.labels("alertmanager").inc()
            log.warning("alertmanager: re-posting %d open alerts failed (%s); next try in %.0fs",
                        len(routed), result.detail, am.resend_s)

    def _commit(self) -> None:
        ready = {w: o for w, o in self.book.offsets.committable().items() if self._stored.get(w) != o}
        if not ready:
            return
        self._producer.flush()  # audit records and dead letters are safe before their offsets are
        try:
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in ready.items()])
        except KafkaException as err:  # e.g. a rebalance took the partition away: it will be re-read
            log.info("offsets not stored (%s); those messages will be delivered again", err.args[0].str())
            return
        self._stored.update(ready)

    def _report(self) -> None:
        for sink in self.book.queues:
            metrics.ALERT_BACKLOG.labels(sink).set(self.book.backlog(sink))
        by_severity = Counter(str(i.severity) for i in self.open.values())
        for severity in ("SEV1", "SEV2", "SEV3", "WARN"):
            metrics.OPEN_INCIDENTS.labels(severity).set(by_severity[severity])

    def _backlog(self) -> str:
        return ", ".join(f"{sink} {self.book.backlog(sink)}" for sink in self.book.queues)

    def close(self) -> None:
        """Leave the group, committing what is stored; undelivered messages are re-read on restart."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._producer.close()


def _without_secrets(body: Any) -> Any:
    if isinstance(body, dict) and "routing_key" in body:
        return {**body, "routing_key": "<secret>"}
    return body
