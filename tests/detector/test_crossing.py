"""Detect on the crossing: a key turns hot between closes once its count over at most the
last window reaches its threshold; cooling stays at the close."""

from __future__ import annotations

import math
import random
from collections.abc import Container

import pytest

from hotkeyd.batch import Batch
from hotkeyd.detector import detector as detector_mod
from hotkeyd.detector.rules import parse_rules
from hotkeyd.detector.window import SubWindowRing

from .conftest import MakeSim

RULES = parse_rules("[default]\nthreshold = 100\nttl = 2\ncooldown = 0.3\n")


def test_a_burst_is_announced_when_it_crosses_not_at_the_next_close(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"bg": 10.0}, 1.0)
    sim.clock.advance(0.03)  # 30 ms into the open sub-window
    sim.det.ingest(Batch(keys=[b"burst"], counts=[99], source="test"))
    assert sim.det.crossing() is None  # 99 < 100 over the window so far
    sim.clock.advance(2 * detector_mod.CROSSING_EVERY)
    sim.det.ingest(Batch(keys=[b"burst"], counts=[1], source="test"))
    res = sim.det.crossing()
    assert res is not None and [e.key for e in res.hot] == [b"burst"]
    assert [t.kind for t in res.transitions] == ["hot"] and res.hot[0].rate == 100.0
    assert b"burst" in sim.hot_keys()
    sim.clock.advance(0.07)
    assert sim.det.tick().hot == []  # the close does not announce it twice


def test_only_the_last_window_counts(make_sim: MakeSim) -> None:
    """50 in a sub-window a full window ago and 50 now: 100, but over more than a window."""
    sim = make_sim(RULES)
    sim.feed({b"k": 500.0})  # 50 in the sub-window that opens the window
    sim.run(None, 1.0)  # that sub-window is now the oldest closed one, N back
    sim.det.ingest(Batch(keys=[b"k"], counts=[50], source="test"))
    assert sim.det.crossing() is None
    assert b"k" not in sim.hot_keys()


def test_no_new_input_no_check_and_rate_limited(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.det.ingest(Batch(keys=[b"a"], counts=[50], source="test"))
    assert sim.det.crossing() is None
    sim.det.ingest(Batch(keys=[b"a"], counts=[60], source="test"))
    assert sim.det.crossing() is None  # within CROSSING_EVERY of the last check
    sim.clock.advance(2 * detector_mod.CROSSING_EVERY)
    assert sim.det.crossing() is not None  # the input since is checked now
    sim.clock.advance(2 * detector_mod.CROSSING_EVERY)
    assert sim.det.crossing() is None  # nothing new


def test_cooling_stays_at_the_close(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.det.ingest(Batch(keys=[b"a"], counts=[150], source="test"))
    assert sim.det.crossing() is not None
    results = sim.run(None, 1.5)
    cooled = [i for i, r in enumerate(results) if r.cool]
    assert cooled and all(not r.hot for r in results)
    # it left the window after 1 s and cooled after the 0.3 s cool-down, at a close
    assert cooled[0] >= 12


def test_at_the_cap_a_crossing_waits_for_the_close(make_sim: MakeSim) -> None:
    sim = make_sim(RULES, max_hot=1)
    sim.det.ingest(Batch(keys=[b"a"], counts=[150], source="test"))
    assert sim.det.crossing() is not None
    sim.clock.advance(2 * detector_mod.CROSSING_EVERY)
    sim.det.ingest(Batch(keys=[b"b"], counts=[900], source="test"))
    assert sim.det.crossing() is None  # no eviction between closes
    sim.clock.advance(0.1)
    res = sim.det.tick()
    assert [e.key for e in res.hot] == [b"b"] and [e.key for e in res.cool] == [b"a"]


def test_the_closed_sub_windows_before_add_up(make_sim: MakeSim) -> None:
    """A burst that began in earlier sub-windows crosses with a few counts in the open one."""
    sim = make_sim(RULES)
    sim.run({b"bg": 10.0}, 1.0)
    sim.feed({b"b": 950.0})  # 95 in the open sub-window, not yet 100
    assert sim.det.crossing() is None
    sim.clock.advance(0.1)
    sim.det.tick()  # 95 over the window: not hot at the close
    sim.clock.advance(2 * detector_mod.CROSSING_EVERY)
    sim.det.ingest(Batch(keys=[b"b"], counts=[5], source="test"))
    res = sim.det.crossing()
    assert res is not None and [e.key for e in res.hot] == [b"b"]


def test_the_cheap_bound_changes_no_outcome(
    make_sim: MakeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check skipped on its bound announces exactly what the full check announces.

    Two detectors get the same random traffic (background far below the threshold, bursts
    that cross it, some keys hot already, two lanes); in one the bound never skips. Every
    crossing result and every close must be equal.
    """
    rng = random.Random(27)
    fast, full = make_sim(RULES, k=8), make_sim(RULES, k=8)
    real = SubWindowRing.crossing_bound

    def never_skips(self: SubWindowRing, hot: Container[bytes], nhot: int) -> float | None:
        if any(self is lane.ring for lane in full.det._lanes.values()):
            return math.inf
        return real(self, hot, nhot)

    monkeypatch.setattr(SubWindowRing, "crossing_bound", never_skips)
    announced = 0
    for _ in range(600):
        keys = [b"bg%d" % rng.randrange(40) for _ in range(rng.randrange(1, 6))]
        counts = [rng.choice([1, 2]) for _ in keys]
        if rng.random() < 0.2:
            keys.append(b"burst%d" % rng.randrange(10))
            counts.append(30)
        event = rng.random() < 0.3
        ts = fast.clock.time() - rng.random() * 0.2 if event else None
        for sim in (fast, full):
            sim.det.ingest(Batch(keys=keys, counts=counts, source="b" if event else "a", ts=ts))
        fast.clock.advance(detector_mod.CROSSING_EVERY)  # the clock both share
        got, want = fast.det.crossing(), full.det.crossing()
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            announced += 1
            assert got.hot == want.hot and got.transitions == want.transitions
        if fast.det.due() <= 0:
            assert fast.det.tick() == full.det.tick()
    assert announced >= 5 and fast.hot_keys() == full.hot_keys()


def test_crossing_in_says_when_unchecked_input_may_be_checked(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    assert sim.det.crossing_in() == math.inf  # no input
    sim.det.ingest(Batch(keys=[b"a"], counts=[50], source="test"))
    assert sim.det.crossing_in() == 0.0
    assert sim.det.crossing() is None
    assert sim.det.crossing_in() == math.inf  # checked
    sim.clock.advance(detector_mod.CROSSING_EVERY / 5)
    sim.det.ingest(Batch(keys=[b"a"], counts=[60], source="test"))
    assert sim.det.crossing() is None  # within CROSSING_EVERY of the last check
    assert sim.det.crossing_in() == pytest.approx(0.8 * detector_mod.CROSSING_EVERY)
    sim.clock.advance(0.81 * detector_mod.CROSSING_EVERY)
    assert sim.det.crossing_in() == 0.0
    assert sim.det.crossing() is not None and sim.det.crossing_in() == math.inf
