"""Demand reports in the detector: locally served reads keep a hot key hot, and only then."""

from __future__ import annotations

from hotkeyd.detector.rules import parse_rules
from hotkeyd.detector.served import ServedRing

from .conftest import MakeSim

RULES = parse_rules(
    """
[default]
threshold = 100
ttl = 1
cooldown = 0.5
"""
)


def local_of(sim: object, key: bytes) -> tuple[float, float]:
    for e in sim.det.top(100):  # type: ignore[attr-defined]
        if e.key == key:
            return float(e.rate), float(e.local)
    return 0.0, 0.0


def test_served_reads_keep_a_hot_key_hot_and_cool_it_when_they_stop(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"k": 1000.0}, 1.0)
    assert sim.hot_keys() == {b"k"}
    # the apps now serve it: Redis sees a trickle, the reports carry the rest
    for _ in range(30):
        assert sim.det.ingest_served([b"k"], [99]) == (99, 0)
        res = sim.step({b"k": 10.0})
        assert not res.cool
    rate, local = local_of(sim, b"k")
    assert 900 < rate < 1100 and 0.85 < local / rate <= 1.0
    # the demand ends: cool within cooldown + window (+ a tick)
    cooled_after = None
    for i in range(40):
        if sim.step().cool:
            cooled_after = (i + 1) * sim.tick
            break
    assert cooled_after is not None and cooled_after <= 0.5 + 1.0 + 0.1 + 1e-9


def test_reports_for_keys_not_hot_here_change_nothing(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    for _ in range(20):
        assert sim.det.ingest_served([b"other", b"x"], [500, 1], db=0) == (0, 2)
        sim.step({b"k": 1000.0})
    assert sim.hot_keys() == {b"k"}
    assert local_of(sim, b"other") == (0.0, 0.0)
    # a key hot in db 0 is not the same key in db 3
    assert sim.det.ingest_served([b"k"], [5], db=3) == (0, 1)
    assert sim.det.ingest_served([b"k", b"x"], [5, 7], db=0) == (5, 1)


def test_served_ring_is_bounded_by_the_window() -> None:
    ring = ServedRing(3)
    for i in range(10):
        ring.add(i, b"k", 1)
        ring.add(i, b"j", 2)
        ring.advance(i + 1)
        assert len(ring._slots) <= 4
    assert ring.sums(10) == {b"k": 3, b"j": 6}
    assert ring.sums(20) == {}
