"""The detector service's one config object: how `trainmedic detector` runs (engine, app id, where it
starts, event-time ordering) and the detection core's tuning, its sections YAML only
(docs/streams.md, "Running it").
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, create_model, field_validator, model_validator

from trainmedic.common.timespan import parse_instant
from trainmedic.streams.core import SECTIONS, DetectorConfig
from trainmedic.streams.live_config import LiveConfig

# DetectorConfig's sections, top-level keys of the file and no flags: tuning tables, not options.
CORE_SECTIONS = tuple(SECTIONS)
ENDS = ("earliest", "latest")

# The service config's fields for the core's sections, made from the core's own list of them (each
# defaults to its class's defaults), so that a section added to the core is a YAML key here too.
_CoreSections = create_model("_CoreSections", **{name: (kind, Field(default_factory=kind))
                                                 for name, kind in SECTIONS.items()})


class DetectorServiceConfig(_CoreSections):
    """Validated when built, the core's cross-section rules included. `app_id` has no default here:
    the command derives it from the topic prefix (`<prefix>detector`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    app_id: str = Field(min_length=1, description="consumer group, Faust app id and stem of the "
                        "detector's own topics, <app-id>-checkpoints (default: <topic prefix>detector)")
    engine: Literal["consumer", "faust"] = Field("consumer", description="consumer: a plain Kafka "
                                                 "consumer loop; faust: a Faust worker")
    start: str = Field("latest", description="consumer engine, with no checkpoint (or one it cannot "
                       "read): where to begin: earliest, latest, an ISO 8601 time or a span ago like 10m "
                       "(sharded: the ingest stage's, for partitions its group has no offset for)")
    stage: Literal["all", "ingest", "decide"] = Field("all", description="all: one detector reads the "
                                                      "telemetry and decides (the default, for up to a few "
                                                      "thousand nodes); a sharded detector runs any number "
                                                      "of ingest instances (validation, in the consumer "
                                                      "group <app-id>-ingest) and one decide instance "
                                                      "(docs/streams.md, 'Detection for a large cluster')")
    instance: str = Field(min_length=1, max_length=200,
                          pattern=r"^[A-Za-z0-9._-]+$", description="ingest stage: this instance's name, "
                          "unique in the group and the same across its restarts (names its Kafka "
                          "transactions; default: the host name)")
    events_partitions: int = Field(12, ge=1, le=10_000, description="sharded: partitions of "
                                   "<app-id>-events, when an instance creates it")
    live: LiveConfig = LiveConfig()
    datadir: Path = Field(description="faust engine: Faust's local data directory "
                          "(default: $TRAINMEDIC_HOME/detector)")
    keys_dir: Path = Field(description="folder of the coordinator's public keys: a worker event moves a "
                           "job to a generation only with a placement one of them signed; none there: "
                           "not checked (default: $TRAINMEDIC_HOME/keys)")
    web_port: int | None = Field(None, ge=1, le=65535, description="faust engine: serve Faust's web "
                                 "views on this port (off by default)")
    loglevel: Literal["debug", "info", "warn", "error"] = Field("info", description="log level")

    @field_validator("start", mode="before")
    @classmethod
    def _when(cls, value: Any) -> Any:
        if isinstance(value, date):  # YAML reads an unquoted ISO time as a datetime
            value = value.isoformat()
        if isinstance(value, str) and value.strip() not in ENDS:
            parse_instant(value, 0.0)  # its form only; the span is taken from now at start
        return value.strip() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _core_rules(self) -> DetectorServiceConfig:
        self.detection  # noqa: B018 - DetectorConfig checks the rules across its sections when built
        if self.engine == "faust" and self.stage != "all":
            raise ValueError(f"stage {self.stage} runs on the consumer engine only: the Faust engine "
                             "reads the telemetry itself (docs/streams.md says why)")
        return self

    @property
    def detection(self) -> DetectorConfig:
        """The detection core's config, from the sections."""
        return DetectorConfig(**{name: getattr(self, name) for name in SECTIONS})

    def start_at(self, now: float) -> str | float:
        """Where a first start begins: `earliest`, `latest` or Unix seconds (a span counts back
        from `now`)."""
        return self.start if self.start in ENDS else parse_instant(self.start, now)
