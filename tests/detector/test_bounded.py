"""Memory stays bounded under millions of distinct keys; hot keys still stand out."""

from __future__ import annotations

import random

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig
from hotkeyd.detector.rules import parse_rules

from .conftest import ExactSketch

RULES = """
[default]
threshold = 2000
[[rule]]
name = "users"
glob = "u:*:x"
threshold = 1000
"""


@pytest.mark.parametrize("kind", ["exact", "native"])
def test_millions_of_distinct_keys_keep_state_bounded(kind: str) -> None:
    config = DetectorConfig(k=50, max_hot=20)
    # The exact stand-in drops keys past its capacity: bounded like a real sketch.
    factory = (lambda: ExactSketch(k=config.k, capacity=5000)) if kind == "exact" else None
    rules = parse_rules(RULES, cache_size=256)
    clock = ManualClock()
    det = Detector(config, rules, clock, sketch_factory=factory)
    assert det.nbytes == 0  # lanes are allocated when their source's first batch comes
    det.ingest(Batch(lines=b"first\n", source="load"))
    nbytes = det.nbytes
    per_tick = 100_000
    hot_lines = b"".join(b"u:%d:x\n" % i * 150 for i in range(5))  # 1500/s each, > 1000
    for t in range(20):  # 2,000,000 distinct keys at 1 access each
        base = t * per_tick
        buf = b"".join(b"u:%d:y\n" % i for i in range(base, base + per_tick))
        # Hot lines first: the exact stand-in keeps the first keys it sees when full.
        res = det.ingest(Batch(lines=hot_lines + buf, source="load"))
        assert res.events == per_tick + 750
        clock.advance(0.1)
        det.tick()
        stats = det.stats()
        assert stats["hot"] <= config.max_hot
        assert stats["rated"] <= config.subwindows * config.k + config.max_hot
        assert stats["rule_cache"] <= 256
        assert stats["estimate_cache"] <= 4 * (config.subwindows * config.k + config.max_hot) + 1024
    assert {e.key for e in det.hot()} == {b"u:%d:x" % i for i in range(5)}
    assert all(e.rule == "users" for e in det.hot())
    if kind == "native":
        # Sketches are re-sized for the key lengths seen (detector/sizing.py), within budget.
        assert nbytes <= config.memory and det.nbytes <= config.memory


def test_rates_of_heavy_hitters_under_skewed_load() -> None:
    """Real sketch, Zipf-like background: heavy hitters' rates within a few percent."""
    rng = random.Random(7)
    clock = ManualClock()
    det = Detector(DetectorConfig(), parse_rules("[default]\nthreshold = 500\n"), clock)
    heavy = {b"h:%d" % i: 600 + 200 * i for i in range(8)}  # true rates per second
    universe = [b"bg:%d" % i for i in range(50_000)]
    weights = [1.0 / (i + 1) for i in range(len(universe))]
    for _ in range(15):
        keys = rng.choices(universe, weights, k=20_000)  # 200k/s of background
        for key, rate in heavy.items():
            keys += [key] * (rate // 10)
        rng.shuffle(keys)
        det.ingest(Batch(keys=keys, source="zipf"))
        clock.advance(0.1)
        det.tick()
    got = {e.key: e.rate for e in det.top(50)}
    for key, rate in heavy.items():
        assert got[key] == pytest.approx(rate, rel=0.05), key
    assert {e.key for e in det.hot()} >= set(heavy)
