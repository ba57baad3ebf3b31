"""The pure detection core: telemetry events in, incidents out. No Kafka, no clock."""

from trainmedic.streams.core.config import (
    SECTIONS,
    CorrelationConfig,
    DetectorConfig,
    EscalationConfig,
    GapConfig,
    GpuConfig,
    HangConfig,
    HeartbeatConfig,
    LimitsConfig,
    LinkConfig,
    StragglerConfig,
)
from trainmedic.streams.core.detector import Detector
from trainmedic.streams.core.state import DetectorState

__all__ = [
    "CorrelationConfig", "Detector", "DetectorConfig", "DetectorState", "EscalationConfig",
    "GapConfig", "GpuConfig", "HangConfig", "HeartbeatConfig", "LimitsConfig",
    "LinkConfig", "SECTIONS", "StragglerConfig",
]
