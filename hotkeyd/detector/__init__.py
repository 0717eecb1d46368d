"""Hot-key detection: windowed rates from rotating sub-window sketches, hot/cool states."""

from __future__ import annotations

from hotkeyd.detector.config import (
    DetectorConfig,
    IngestResult,
    RateEntry,
    TickResult,
    Transition,
)
from hotkeyd.detector.detector import Detector

__all__ = [
    "Detector",
    "DetectorConfig",
    "IngestResult",
    "RateEntry",
    "TickResult",
    "Transition",
]
