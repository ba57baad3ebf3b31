"""`LiveDetector`'s config, a module of its own: the order buffer (streams/ordering.py) and the read
tracker (streams/read_tracking.py) read it too, and the service's config (streams/config.py) nests it.
See docs/streams.md, "Event time from Kafka: watermark and lateness" and "Blind is not dead"."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LiveConfig(BaseModel):
    """How long to wait for stragglers, and when a partition counts as idle."""

    model_config = {"frozen": True, "extra": "forbid"}

    lateness_s: float = Field(default=0.5, ge=0, description="event time allowed between topics")
    failure_lateness_s: float = Field(default=0.05, ge=0, description="event time allowed between "
                                      "topics while a rank's first failure report of its job's generation "
                                      "(worker_error, worker_exit) is held, up to that report: its incident "
                                      "is out sooner than lateness_s allows, and evidence another producer "
                                      "stamped before it but delivered more than this after it is used out "
                                      "of order, where a replay would order it; at lateness_s or more, a "
                                      "failure report waits as any event")
    idle_s: float = Field(default=2.0, gt=0, description="wall time after which a silent partition "
                          "no longer holds the watermark back")
    max_buffered: int = Field(default=500_000, ge=1, description="events held before the oldest "
                              "are released regardless, out of order: a last resort, kept well above "
                              "order_at")
    order_at: int = Field(default=100_000, ge=1, description="events held from which an event that "
                          "arrives over 0.5 s (event time) ahead of the slowest partition waits, "
                          "unfed, until that partition catches up; set it above what the cluster "
                          "holds in steady state (its events/s x about 0.6 s)")
    pause_at: int = Field(default=250_000, ge=1, description="events held and waiting from which the "
                          "consumer engine stops reading each partition with more than its share of "
                          "them waiting, until they are fed: at most about 2 x pause_at + order_at are held "
                          "and waiting")
    release_every_s: float = Field(default=0.01, ge=0, description="wall time between watermark "
                                   "updates on arrival (ticks always update): the watermark spans "
                                   "every partition, too costly to recompute per event")
    max_skew_s: float = Field(default=300.0, gt=0, description="an event whose ts is further than "
                              "this behind the time the broker stamped its message is dead-lettered "
                              "and used at the stamped time, never at its own")
    max_ahead_s: float = Field(default=5.0, gt=0, description="an event whose ts is further than this "
                               "ahead of the broker's stamp on its message, or of the detector's own "
                               "clock, is dead-lettered (clock_skew) and not used: no producer's clock "
                               "moves event time on")
    blind_s: float = Field(default=3.0, gt=0, description="reads unconfirmed for longer than this "
                           "(broker down or frozen) are a blind spell: afterwards event time waits "
                           "rejoin_s for the producers")
    rejoin_s: float = Field(default=10.0, ge=0, description="after a blind spell: how long event time "
                            "stays where it was while the producers reconnect (librdkafka backs off up "
                            "to 10 s by default, 1 s as trainmedic sets it) and send what they held; "
                            "nodes share partitions, so one node's "
                            "late backlog lands behind another's fresh data")
    stall_s: float = Field(default=1.0, gt=0, description="wall time between two calls (events or "
                           "ticks) beyond which the detector itself was paused: that time is not "
                           "read time, event time does not move on with it")
