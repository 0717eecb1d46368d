"""Hot-key detection: windowed rates from rotating sub-window sketches, hot/cool states.

Public names are loaded lazily (PEP 562) so that ``hotkeyd.detector.rules`` can import the
small helpers in this package (glob matching, TOML line lookup) without pulling in
the detector, which itself imports ``hotkeyd.detector.rules``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hotkeyd.detector.config import (
        DetectorConfig,
        IngestResult,
        RateEntry,
        TickResult,
    )
    from hotkeyd.detector.detector import Detector
    from hotkeyd.detector.window import SketchLike

__all__ = [
    "Detector",
    "DetectorConfig",
    "IngestResult",
    "RateEntry",
    "SketchLike",
    "TickResult",
]

_WHERE = {
    "Detector": "hotkeyd.detector.detector",
    "DetectorConfig": "hotkeyd.detector.config",
    "IngestResult": "hotkeyd.detector.config",
    "RateEntry": "hotkeyd.detector.config",
    "TickResult": "hotkeyd.detector.config",
    "SketchLike": "hotkeyd.detector.window",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'hotkeyd.detector' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
