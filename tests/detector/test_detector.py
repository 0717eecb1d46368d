"""Detector behaviour: rates over the window, hot/cool with hysteresis, cap, re-announce."""

from __future__ import annotations

import itertools

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig
from hotkeyd.detector.rules import RuleSet, parse_rules
from hotkeyd.errors import ConfigError
from hotkeyd.metrics import Metrics

from .conftest import ExactSketch, MakeSim

RULES = parse_rules(
    """
[default]
threshold = 100
ttl = 1
cooldown = 2

[[rule]]
name = "noise"
prefix = "noise:"
ignore = true

[[rule]]
name = "carts"
prefix = "cart:"
threshold = 50
"""
)


def rate_of(sim: object, key: bytes, db: int = 0) -> float:
    for e in sim.det.top(10_000):  # type: ignore[attr-defined]
        if e.key == key and e.db == db:
            return float(e.rate)
    return 0.0


def test_jump_from_background_detected_within_two_ticks(
    make_sim: MakeSim, sketch_kind: str
) -> None:
    sim = make_sim(RULES, kind=sketch_kind)
    background = {b"bg:%d" % i: 20.0 for i in range(500)}
    background[b"item:1"] = 10.0  # 10x below threshold
    sim.run(background, 2.0)
    assert sim.hot_keys() == set()
    jump = dict(background)
    jump[b"item:1"] = 1000.0  # 10x threshold
    found = [(e, sim.clock.time()) for _ in range(2) for e in sim.step(jump).hot]
    assert [e.key for e, _ in found] == [b"item:1"]
    entry, detected_at = found[0]
    assert entry.rule == "default"
    assert entry.ttl_ms == 1000
    assert entry.since == detected_at  # the wall time of the tick that detected it
    assert entry.rate >= 100.0


def test_old_traffic_stops_counting_after_the_window(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"k": 500.0}, 1.0)
    assert rate_of(sim, b"k") == pytest.approx(500.0)
    seen = []
    for _ in range(10):
        sim.step()
        seen.append(rate_of(sim, b"k"))
    # Each tick drops exactly one sub-window of 50 accesses (= 50/s).
    assert seen == pytest.approx([450.0 - 50.0 * i for i in range(10)])
    assert sim.det.top() == []


def test_hovering_at_threshold_does_not_flap(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    transitions = []
    rates = []
    for phase in range(10):  # 1 s at 115/s, 1 s at 85/s, ...: the rate swings 85..115
        for r in sim.run({b"k": 114.0 if phase % 2 == 0 else 86.0}, 1.0):
            transitions += [("hot", e.key) for e in r.hot] + [("cool", e.key) for e in r.cool]
            rates.append(rate_of(sim, b"k"))
    assert max(rates) > 100 and min(r for r in rates[10:]) < 100  # it really crosses the threshold
    assert transitions == [("hot", b"k")]


def test_without_hysteresis_the_same_traffic_flaps(make_sim: MakeSim) -> None:
    rules = parse_rules("[default]\nthreshold = 100\ncooldown = 0\n")
    sim = make_sim(rules, hysteresis=1.0)
    flips = 0
    for phase in range(10):
        for r in sim.run({b"k": 114.0 if phase % 2 == 0 else 86.0}, 1.0):
            flips += len(r.hot) + len(r.cool)
    assert flips > 4  # the control: hysteresis is what keeps the previous test calm


def test_cools_only_after_staying_below_for_the_cooldown(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"k": 200.0}, 1.0)
    assert sim.hot_keys() == {b"k"}
    # A dip below threshold*hysteresis (80) shorter than the cool-down changes nothing.
    for r in sim.run({b"k": 20.0}, 1.5) + sim.run({b"k": 200.0}, 1.0):
        assert r.cool == []
    assert sim.hot_keys() == {b"k"}
    below_since = None
    cooled_at = None
    for _ in range(60):
        r = sim.step({b"k": 20.0})
        now = sim.clock.monotonic()
        if below_since is None and rate_of(sim, b"k") < 80.0:
            below_since = now
        if r.cool:
            assert [c.key for c in r.cool] == [b"k"]
            cooled_at = now
            break
        assert b"k" in sim.hot_keys()
    assert below_since is not None and cooled_at is not None
    assert cooled_at - below_since == pytest.approx(2.0)


def test_cap_keeps_the_highest_rates(make_sim: MakeSim, metrics: Metrics) -> None:
    sim = make_sim(RULES, max_hot=3)
    traffic = {b"a": 500.0, b"b": 400.0, b"c": 300.0, b"d": 200.0, b"e": 150.0}
    sim.run(traffic, 1.5)
    assert sim.hot_keys() == {b"a", b"b", b"c"}
    traffic[b"f"] = 1000.0
    cooled = []
    for r in sim.run(traffic, 1.5):
        cooled += [c.key for c in r.cool]
        assert len(sim.det.hot()) <= 3
    assert sim.hot_keys() == {b"a", b"b", b"f"}
    assert cooled == [b"c"]  # the lowest hot key is evicted, once
    # A newcomer within the 1/hysteresis margin of the lowest hot key (400) does not evict it.
    traffic[b"g"] = 450.0
    for r in sim.run(traffic, 1.5):
        assert r.cool == [] and r.hot == []
    traffic[b"h"] = 600.0  # 600 * 0.8 > 400: evicts b
    cooled = [c.key for r in sim.run(traffic, 1.5) for c in r.cool]
    assert cooled == [b"b"]
    assert sim.hot_keys() == {b"a", b"f", b"h"}
    evictions = metrics.registry.get_sample_value(
        "hotkeyd_detector_transitions_total", {"kind": "evict"}
    )
    assert evictions == 2


def test_hot_keys_are_reannounced_before_ttl(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)  # ttl = 1 s
    announced = []
    for _ in range(60):
        r = sim.step({b"k": 300.0})
        if any(e.key == b"k" for e in r.hot + r.still_hot):
            announced.append(sim.clock.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(announced)]
    assert len(announced) >= 10
    assert max(gaps) < 1.0  # a client's cached entry never expires while the key is hot
    assert max(gaps) == pytest.approx(0.5)
    assert all(e.rule == "default" for e in sim.det.hot())


def test_ignore_rules_and_first_match(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"noise:1": 5000.0, b"cart:1": 60.0, b"other": 60.0}, 1.5)
    assert sim.hot_keys() == {b"cart:1"}  # carts threshold 50; default 100; noise ignored
    top = {e.key: e for e in sim.det.top()}
    assert top[b"noise:1"].rule == "noise" and not top[b"noise:1"].hot
    assert top[b"cart:1"].rule == "carts" and top[b"cart:1"].hot and top[b"cart:1"].since
    assert next(iter(top)) == b"noise:1"  # highest rate first
    assert top[b"other"].rule == "default" and not top[b"other"].hot


def test_binary_keys_from_lines_and_keys(make_sim: MakeSim, sketch_kind: str) -> None:
    rules = parse_rules(
        '[default]\nthreshold = 1000\n[[rule]]\nname = "bin"\nprefix = "00ff"\nencoding = "hex"\n'
        "threshold = 50\n"
    )
    sim = make_sim(rules, kind=sketch_kind)
    weird = b"\x00\xff key with 'quotes' \"and\" spaces\x01"
    other = b"\xc3\x28 not utf-8"
    for _ in range(12):
        sim.det.ingest(Batch(lines=(weird + b"\n") * 10 + (other + b"\r\n") * 4, source="t"))
        sim.det.ingest(Batch(keys=[other], counts=[2], source="t"))
        sim.clock.advance(0.1)
        sim.det.tick()
    hot = {e.key: e for e in sim.det.hot()}
    assert set(hot) == {weird}
    assert hot[weird].rule == "bin"
    assert hot[weird].rate == pytest.approx(100.0, rel=0.05)
    assert rate_of(sim, other) == pytest.approx(60.0, rel=0.05)


def test_counted_lines_and_malformed_are_counted(make_sim: MakeSim, metrics: Metrics) -> None:
    sim = make_sim(RULES, max_key_len=16)
    res = sim.det.ingest(
        Batch(
            lines=b"a\t5\nb\t7\nbad line\nc\tx\n" + b"z" * 17 + b"\t1\n", counted=True, source="s1"
        )
    )
    assert (res.events, res.malformed, res.oversized, res.late) == (12, 2, 1, 0)
    res = sim.det.ingest(Batch(keys=[b"k", b"y" * 17], counts=[3, 4], source="s1"))
    assert (res.events, res.oversized) == (3, 1)

    def sample(reason: str) -> float | None:
        return metrics.registry.get_sample_value(
            "hotkeyd_source_malformed_total", {"source": "s1", "reason": reason}
        )

    assert sample("malformed") == 2
    assert sample("oversized") == 2
    sim.step()
    assert rate_of(sim, b"b") == pytest.approx(7.0)


def test_keys_per_db_are_separate(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    for _ in range(11):
        sim.feed({b"cart:1": 60.0}, db=3)
        sim.feed({b"cart:1": 20.0}, db=0)
        sim.det.ingest(Batch(lines=b"cart:2\n" * 7 + b"\n", db=5, source="t"))
        sim.step()
    hot = {(e.db, e.key) for e in sim.det.hot()}
    assert hot == {(3, b"cart:1"), (5, b"cart:2")}
    assert rate_of(sim, b"cart:1", db=0) == pytest.approx(20.0)
    assert rate_of(sim, b"cart:1", db=3) == pytest.approx(60.0)
    assert all(e.rule == "carts" for e in sim.det.hot())
    assert {e.to_json().get("db") for e in sim.det.hot()} == {3, 5}


def test_read_write_kind(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    for _ in range(11):
        keys = [b"r", b"w", b"m"]
        sim.det.ingest(
            Batch(
                keys=keys,
                counts=[20, 20, 20],
                writes=[b"w", b"m"],
                write_counts=[20, 10],
                source="mon",
            )
        )
        sim.det.ingest(Batch(keys=[b"plain"], counts=[20], source="kafka"))
        sim.step()
    kinds = {e.key: e.kind for e in sim.det.hot()}
    assert kinds == {b"r": "read", b"w": "write", b"m": "mixed", b"plain": "read"}
    assert {e.key: e.kind for e in sim.det.top()} == kinds


def test_kind_is_none_when_no_source_can_tell(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run({b"k": 200.0}, 1.5)
    assert [e.kind for e in sim.det.hot()] == [None]
    assert "kind" not in sim.det.hot()[0].to_json()


def test_scale_multiplies_rates(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    for _ in range(10):
        sim.feed({b"k": 30.0}, scale=4.0)
        sim.step()
    assert rate_of(sim, b"k") == pytest.approx(120.0)
    assert sim.hot_keys() == {b"k"}


def test_rules_reload(make_sim: MakeSim, metrics: Metrics) -> None:
    sim = make_sim(RULES)
    sim.run({b"cart:1": 80.0, b"x": 150.0}, 1.5)
    assert sim.hot_keys() == {b"cart:1", b"x"}
    renamed = parse_rules(
        '[default]\nthreshold = 100\nttl = 1\n[[rule]]\nname = "baskets"\nprefix = "cart:"\n'
        'threshold = 50\n[[rule]]\nname = "x"\nexact = "x"\nignore = true\n'
    )
    sim.det.set_rules(renamed)
    r = sim.step({b"cart:1": 80.0, b"x": 150.0})
    assert [(c.key, c.rule) for c in r.cool] == [(b"x", "default")]
    assert [(e.key, e.rule) for e in r.still_hot] == [(b"cart:1", "baskets")]
    assert (
        metrics.registry.get_sample_value("hotkeyd_detector_transitions_total", {"kind": "ignore"})
        == 1
    )
    # A stricter threshold: cart:1 (80/s) is now below 200*0.8 and cools after the cool-down.
    sim.det.set_rules(parse_rules("[default]\nthreshold = 200\ncooldown = 1\n"))
    results = sim.run({b"cart:1": 80.0}, 1.5)
    cooled_at = [i for i, r in enumerate(results) if r.cool]
    assert cooled_at == [10]  # below from the first tick, cooled once 1 s has passed


def test_catch_up_after_a_late_tick_and_due(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    assert sim.det.due() == pytest.approx(0.1, abs=1e-6)
    r = sim.det.tick()
    assert r.closed == 0 and r.hot == [] and r.ts == sim.clock.time()
    sim.feed({b"k": 5000.0})
    sim.clock.advance(0.35)
    assert sim.det.due() <= 0
    r = sim.det.tick()
    assert r.closed == 3
    assert [e.key for e in r.hot] == [b"k"]
    assert sim.det.due() == pytest.approx(0.05, abs=1e-6)
    sim.clock.advance(5.0)
    r = sim.det.tick()
    assert r.closed == 50
    assert sim.det.top() == []


def test_metrics_are_updated(make_sim: MakeSim, metrics: Metrics) -> None:
    sim = make_sim(RULES)
    sim.run({b"k": 200.0}, 1.0)
    sim.run(None, 4.0)
    get = metrics.registry.get_sample_value
    assert get("hotkeyd_detector_ticks_total") == 50
    assert get("hotkeyd_detector_tick_duration_seconds_count") == 50
    assert get("hotkeyd_detector_transitions_total", {"kind": "hot"}) == 1
    assert get("hotkeyd_detector_transitions_total", {"kind": "cool"}) == 1
    assert get("hotkeyd_detector_hot_keys") == 0


def test_config_validation() -> None:
    for bad in (
        {"window": 1.0, "tick": 0.3},
        {"tick": 0},
        {"window": -1},
        {"hysteresis": 0},
        {"hysteresis": 1.5},
        {"max_hot": 0},
        {"k": 0},
        {"memory": 100},
        {"max_key_len": 0},
        {"window": float("nan")},
        {"sketch": ""},
        {"adapt_keys": 1},
        {"adapt_keys": "false"},
    ):
        with pytest.raises(ConfigError):
            DetectorConfig(**bad)
    assert DetectorConfig(window=2.0, tick=0.25).subwindows == 8


def test_rejects_non_ruleset() -> None:
    det = Detector(DetectorConfig(), RuleSet.default(), ManualClock(), sketch_factory=ExactSketch)
    with pytest.raises(TypeError):
        det.set_rules("rules.toml")  # type: ignore[arg-type]


def test_top_and_hot_break_ties_alike() -> None:
    """top() used to list equal rates by key descending, hot() by (db, key) ascending."""

    clock = ManualClock()
    det = Detector(
        DetectorConfig(window=1.0, tick=0.5),
        parse_rules("[default]\nthreshold = 10\n"),
        clock,
        sketch_factory=ExactSketch,
    )
    keys = [b"b", b"a", b"c"]
    det.ingest(Batch(keys=keys, counts=[100, 100, 100]))
    det.ingest(Batch(keys=[b"a"], counts=[100], db=1))
    clock.advance(0.5)
    det.tick()
    hot = [(h.db, h.key) for h in det.hot()]
    top = [(t.db, t.key) for t in det.top()]
    assert hot == [(0, b"a"), (0, b"b"), (0, b"c"), (1, b"a")]
    assert top == hot


def test_top_cuts_ties_at_the_nth_rate_by_key() -> None:
    """Most rates tie under a uniform background: the ones above the n-th rate are kept,
    then the tied ones by key, and none at rate 0 (a hot key whose traffic stopped)."""
    clock = ManualClock()
    det = Detector(
        DetectorConfig(window=1.0, tick=0.5, top_n=4),
        parse_rules("[default]\nthreshold = 1000\n"),
        clock,
        sketch_factory=ExactSketch,
    )
    keys = [b"t%d" % i for i in (5, 1, 9, 3, 7)] + [b"big", b"mid"]
    det.ingest(Batch(keys=keys, counts=[2] * 5 + [50, 9]))
    clock.advance(0.5)
    det.tick()
    assert [(t.key, t.rate) for t in det.top()] == [
        (b"big", 50.0),
        (b"mid", 9.0),
        (b"t1", 2.0),
        (b"t3", 2.0),
    ]
    assert [t.key for t in det.top(10)] == [b"big", b"mid"] + [b"t%d" % i for i in (1, 3, 5, 7, 9)]
