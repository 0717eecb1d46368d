"""Event time per source: lagging sources are rated in their own time, never blind."""

from __future__ import annotations

import pytest

from hotkeyd.batch import Batch
from hotkeyd.detector import TickResult
from hotkeyd.detector.rules import parse_rules
from hotkeyd.metrics import Metrics

from .conftest import MakeSim, Sim

RULES = parse_rules("[default]\nthreshold = 100\nttl = 1\ncooldown = 2\n")


def rate_of(sim: Sim, key: bytes) -> float:
    return next((e.rate for e in sim.det.top(10_000) if e.key == key), 0.0)


def backlog(key: bytes, rate: float, start: float, seconds: float, source: str) -> list[Batch]:
    """``rate``/s of ``key`` from event time ``start``, one batch per 100 ms."""
    n = round(rate * 0.1)
    return [
        Batch(keys=[key], counts=[n], ts=start + 0.1 * i + 0.05, source=source)
        for i in range(round(seconds * 10))
    ]


def test_backlog_keeps_its_spread_and_nothing_is_late(make_sim: MakeSim, metrics: Metrics) -> None:
    """Five seconds of 60/s read in one go: all rated, in event time, so no burst."""
    sim = make_sim(RULES)
    sim.run(None, 5.0)  # the service ticks on while the source lags
    now = sim.clock.time()
    results = [sim.det.ingest(b) for b in backlog(b"k", 60.0, now - 5.0, 5.0, "k")]
    assert sum(r.late for r in results) == 0
    assert sum(r.skipped for r in results) == 0
    assert sum(r.events for r in results) == 300
    assert not metrics.registry.get_sample_value("hotkeyd_detector_late_events_total")
    res = sim.det.tick()
    assert [t for t in res.transitions] == [] and res.hot == []
    assert rate_of(sim, b"k") == pytest.approx(60.0)
    # The same records stamped "now" (no event time) would be a burst of 300/s.
    sim2 = make_sim(RULES)
    for b in backlog(b"k", 60.0, now - 5.0, 5.0, "k"):
        b.ts = None
        sim2.det.ingest(b)
    assert [e.key for e in sim2.step().hot] == [b"k"]


def test_hot_key_in_a_backlog_is_found_at_its_event_time(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run(None, 10.0)
    now = sim.clock.time()
    # 10 s behind: 3 s quiet, then 150/s for 6 s, quiet again; all read within one tick.
    batches = backlog(b"q", 1.0 * 10, now - 10.0, 10.0, "lagging")
    batches += backlog(b"k", 150.0, now - 7.0, 6.0, "lagging")
    batches.sort(key=lambda b: b.ts or 0.0)
    for b in batches:
        assert sim.det.ingest(b).late == 0
    res = sim.det.tick()
    kinds = [(t.kind, t.key) for t in res.transitions]
    assert kinds == [("hot", b"k")]  # it is still hot: the cool-down has not run out
    hot_at = res.transitions[0].at
    # 150/s fills the threshold (100/s over 1 s) after 0.7 s of event time
    assert now - 7.0 + 0.6 <= hot_at <= now - 7.0 + 0.8 + 1e-6
    (entry,) = res.hot
    assert entry.since == pytest.approx(hot_at)
    assert entry.as_of is not None and entry.lag_ms is not None
    assert 0 <= entry.lag_ms <= 200  # the whole backlog was read: the lane is at "now"
    assert sim.det.lags()["lagging"] < 0.2


def test_lagging_and_live_sources_keep_their_own_windows(
    make_sim: MakeSim, metrics: Metrics
) -> None:
    """A source 10 s behind next to an on-time one: neither is late, rates are right."""
    sim = make_sim(RULES)
    late_total = 0
    for _ in range(30):
        wall = sim.clock.time()
        live = Batch(keys=[b"a"], counts=[6], ts=wall - 0.01, source="live")
        behind = Batch(keys=[b"b"], counts=[15], ts=wall - 10.0, source="behind")
        late_total += sim.det.ingest(live).late + sim.det.ingest(behind).late
        sim.step()
    assert late_total == 0
    assert rate_of(sim, b"a") == pytest.approx(60.0, rel=0.15)
    assert rate_of(sim, b"b") == pytest.approx(150.0, rel=0.15)
    assert sim.hot_keys() == {b"b"}
    lags = sim.det.lags()
    assert lags["behind"] == pytest.approx(10.0, abs=0.2)
    assert lags["live"] < 0.3
    assert metrics.registry.get_sample_value(
        "hotkeyd_source_lag_seconds", {"source": "behind"}
    ) == pytest.approx(10.0, abs=0.2)
    # Two sources of one kind get their own lanes when the service names them apart.
    sim.det.ingest(Batch(keys=[b"c"], counts=[1], ts=sim.clock.time() - 20.0), lane="kafka#2")
    assert sim.det.lags()["kafka#2"] == pytest.approx(20.0, abs=0.2)


def test_past_max_lag_the_source_fast_forwards_and_counts(
    make_sim: MakeSim, metrics: Metrics
) -> None:
    sim = make_sim(RULES, max_lag=5.0)
    now = sim.clock.time()
    res = sim.det.ingest(Batch(keys=[b"k"], counts=[40], ts=now - 8.0, source="slow"))
    assert (res.events, res.skipped, res.late) == (0, 40, 0)
    assert sim.det.lags()["slow"] == pytest.approx(5.0)
    res = sim.det.ingest(Batch(keys=[b"k"], counts=[7], ts=now - 4.5, source="slow"))
    assert (res.events, res.skipped) == (7, 0)
    assert (
        metrics.registry.get_sample_value(
            "hotkeyd_source_skipped_events_total", {"source": "slow", "reason": "max_lag"}
        )
        == 40
    )
    sim.run(None, 3.0)  # nothing comes: the lane never falls more than max_lag behind
    assert sim.det.lags()["slow"] <= 5.0 + 1e-6


def test_a_hinted_source_waits_for_its_data(make_sim: MakeSim) -> None:
    """A source that reports "caught up" hints is not taken for quiet when it pauses."""
    sim = make_sim(RULES)
    for _ in range(15):
        sim.det.ingest(Batch(keys=[b"k"], counts=[15], ts=sim.clock.time(), source="kafka"))
        sim.det.advance("kafka", sim.clock.time())
        sim.step()
    assert sim.hot_keys() == {b"k"}
    paused_at = sim.clock.time()
    sim.run(None, 5.0)  # paused: no data, no hints; its event time stands still
    assert sim.hot_keys() == {b"k"}
    assert sim.det.lags()["kafka"] == pytest.approx(5.0, abs=0.2)
    # the backlog of the pause arrives: rated, not late; then the key goes quiet
    for b in backlog(b"k", 150.0, paused_at, 2.0, "kafka") + backlog(
        b"x", 10.0, paused_at + 2.0, 2.0, "kafka"
    ):
        assert sim.det.ingest(b).late == 0
    res = sim.det.tick()
    assert res.transitions == [] and sim.hot_keys() == {b"k"}  # 2 s cool-down not over
    sim.det.advance("kafka", sim.clock.time())
    sim.run(None, 1.0)
    assert sim.hot_keys() == set()


def test_an_unhinted_quiet_source_follows_the_wall_clock(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    for _ in range(15):
        sim.det.ingest(Batch(keys=[b"k"], counts=[15], ts=sim.clock.time(), source="mon"))
        sim.step()
    assert sim.hot_keys() == {b"k"}
    cooled = [r for r in sim.run(None, 4.0) if r.cool]
    assert [c.key for r in cooled for c in r.cool] == [b"k"]


def test_future_timestamps_are_clamped_to_now(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    res = sim.det.ingest(Batch(keys=[b"k"], counts=[30], ts=sim.clock.time() + 3600, source="k"))
    assert (res.events, res.late) == (30, 0)
    sim.run(None, 0.3)
    assert rate_of(sim, b"k") == pytest.approx(30.0)


def test_stragglers_older_than_the_window_are_late(make_sim: MakeSim, metrics: Metrics) -> None:
    sim = make_sim(RULES)
    sim.det.ingest(Batch(keys=[b"now"], ts=sim.clock.time(), source="f"))
    old = sim.clock.time() - 2.5
    res = sim.det.ingest(Batch(lines=b"\na\n\n\n\nb\r\nc", ts=old, source="f"))
    assert (res.events, res.late) == (0, 3)
    res = sim.det.ingest(Batch(lines=b"a\t4\nb\t5\nbad\n", counted=True, ts=old, source="f"))
    assert (res.events, res.late, res.malformed) == (0, 9, 1)
    assert metrics.registry.get_sample_value("hotkeyd_detector_late_events_total") == 12


def test_hot_and_cool_within_one_tick_are_transitions_not_news(make_sim: MakeSim) -> None:
    sim = make_sim(RULES)
    sim.run(None, 20.0)
    now = sim.clock.time()
    batches = backlog(b"burst", 300.0, now - 15.0, 2.0, "k") + backlog(
        b"bg", 10.0, now - 15.0, 15.0, "k"
    )
    batches.sort(key=lambda b: b.ts or 0.0)
    for b in batches:
        sim.det.ingest(b)
    res: TickResult = sim.det.tick()
    assert [(t.kind, t.key, t.reason) for t in res.transitions] == [
        ("hot", b"burst", "hot"),
        ("cool", b"burst", "cool"),
    ]
    hot, cool = res.transitions
    assert hot.at == pytest.approx(now - 15.0 + 0.4, abs=0.1 + 1e-6)  # 300/s: 100 after 0.35 s
    # below 80/s once less than 0.27 s of the burst is in the window, then 2 s cool-down
    assert cool.at == pytest.approx(now - 13.0 + 0.8 + 2.0, abs=0.1 + 1e-6)
    assert cool.since == hot.at and cool.peak == pytest.approx(300.0)
    assert res.hot == [] and res.cool == [] and res.still_hot == []
