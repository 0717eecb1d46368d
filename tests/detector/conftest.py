"""Fixtures for detector tests: an exact-count sketch stand-in and a tick-by-tick driver.

The stand-in counts exactly (up to ``capacity`` distinct keys, after which new keys
are dropped, so memory stays bounded in the cardinality tests). It lets the
detector's logic be tested without sketch error; tests that matter for the real
sketch run against both (``sketch_kind`` fixture).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig, TickResult
from hotkeyd.detector.rules import RuleSet
from hotkeyd.metrics import Metrics


class ExactSketch:
    """Exact counts with a top-k view; same surface as ``hotkeyd.sketch.HeavyKeeper``."""

    def __init__(self, k: int = 200, max_key_len: int = 1024, capacity: int = 1 << 20) -> None:
        self.k = k
        self.max_key_len = max_key_len
        self.capacity = capacity
        self.counts: dict[bytes, int] = {}

    def _add(self, key: bytes, count: int) -> None:
        if key in self.counts:
            self.counts[key] += count
        elif len(self.counts) < self.capacity:
            self.counts[key] = count

    def update(self, key: bytes, count: int = 1) -> None:
        self._add(key, count)

    def update_many(self, keys: Sequence[bytes], counts: Any = None) -> None:
        # Like the real sketch: validate the whole batch first, then apply it.
        cs = [1] * len(keys) if counts is None else [int(c) for c in counts]
        if len(cs) != len(keys) or any(c < 0 for c in cs):
            raise ValueError("bad counts")
        if any(len(key) > self.max_key_len for key in keys):
            raise ValueError("key too long")
        for key, c in zip(keys, cs, strict=True):
            self._add(key, c)

    def update_lines(self, buf: Any, counted: bool = False) -> tuple[int, int, int]:
        events = oversized = malformed = 0
        for line in bytes(buf).split(b"\n"):
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                continue
            count = 1
            if counted:
                key, tab, num = line.rpartition(b"\t")
                if not tab or not num.isdigit():
                    malformed += 1
                    continue
                line, count = key, int(num)
            if len(line) > self.max_key_len:
                oversized += 1
                continue
            self._add(line, count)
            events += count
        return events, oversized, malformed

    def topk(self, n: int | None = None) -> list[tuple[bytes, int]]:
        return heapq.nlargest(n or self.k, self.counts.items(), key=lambda kv: (kv[1], kv[0]))

    def estimate(self, key: bytes) -> int:
        return self.counts.get(key, 0)

    def clear(self) -> None:
        self.counts = {}

    @property
    def nbytes(self) -> int:
        return 64 * len(self.counts)


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
