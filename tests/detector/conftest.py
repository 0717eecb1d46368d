"""Fixtures for detector tests: an exact-count sketch stand-in and a tick-by-tick driver.

The stand-in counts exactly (up to ``capacity`` distinct keys, after which new keys
are dropped, so memory stays bounded in the cardinality tests). It lets the
detector's logic be tested without sketch error; tests that matter for the real
sketch run against both (``sketch_kind`` fixture).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig, TickResult
from hotkeyd.detector.rules import RuleSet
from hotkeyd.metrics import Metrics
from hotkeyd.testing import ExactSketch


def sketch_factory_for(kind: str, config: DetectorConfig) -> Callable[[], Any] | None:
    """``None`` (the detector's default, the real sketch) or the exact stand-in."""
    if kind == "exact":
        return lambda: ExactSketch(k=config.k, max_key_len=config.max_key_len)
    return None


class Sim:
    """Drives a detector tick by tick with rates in accesses per second."""

    def __init__(self, detector: Detector, clock: ManualClock) -> None:
        self.det = detector
        self.clock = clock
        self.tick = detector.config.tick

    def feed(self, rates: dict[bytes, float], db: int = 0, **batch: Any) -> None:
        """Ingest one tick's worth of ``rates`` into the open sub-window."""
        keys = [k for k, r in rates.items() if round(r * self.tick) > 0]
        if keys:
            counts = [round(rates[k] * self.tick) for k in keys]
            self.det.ingest(Batch(keys=keys, counts=counts, db=db, source="test", **batch))

    def step(self, rates: dict[bytes, float] | None = None, **batch: Any) -> TickResult:
        """Feed ``rates`` for one tick, move the clock one tick, evaluate."""
        if rates:
            self.feed(rates, **batch)
        self.clock.advance(self.tick)
        return self.det.tick()

    def run(self, rates: dict[bytes, float] | None, seconds: float) -> list[TickResult]:
        return [self.step(rates) for _ in range(round(seconds / self.tick))]

    def hot_keys(self) -> set[bytes]:
        return {e.key for e in self.det.hot()}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture(params=["exact", "native"])
def sketch_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


MakeSim = Callable[..., Sim]


@pytest.fixture
def make_sim(clock: ManualClock, metrics: Metrics, sketch_kind: str) -> Iterator[MakeSim]:
    """Builds detectors on the shared clock; every test runs once per sketch kind."""

    def make(rules: RuleSet | None = None, kind: str = sketch_kind, **cfg: Any) -> Sim:
        config = DetectorConfig(**cfg)
        det = Detector(
            config,
            rules if rules is not None else RuleSet.default(),
            clock,
            metrics=metrics,
            sketch_factory=sketch_factory_for(kind, config),
        )
        return Sim(det, clock)

    yield make
