"""The demand intake's defences (issue 23): reporter-key signing checked before parsing,
freshness, the (app, seq) window, per-app budgets, bounded state, health."""

from __future__ import annotations

import time

import pytest

from hotkeyd.client.demand import DemandCounter, reporter_key_from_env
from hotkeyd.client.hotset import HotSet
from hotkeyd.clock import ManualClock
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import MAX_REPORT_BYTES, DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.sources.demand import DemandIntake

NS = Namespace("t")
KEY = MessageAuth([b"reporter-key-0123456789"])
T0 = 1_764_480_000.0


def make(**kw: object) -> tuple[DemandIntake, Metrics, ManualClock]:
    m, clock = Metrics(), ManualClock(epoch=T0)
    return DemandIntake("redis://127.0.0.1:1", NS, "d1", metrics=m, clock=clock, **kw), m, clock  # type: ignore[arg-type]


def rep(seq: int, ts: float = T0, n: int = 5, app: str = "app") -> bytes:
    return DemandReport(app, seq, ts, 250, (DemandEntry(b"k", n),)).dumps()


def dropped(m: Metrics, reason: str) -> float:
    v = m.registry.get_sample_value("hotkeyd_demand_reports_dropped_total", {"reason": reason})
    return v or 0.0


def test_with_a_reporter_key_unsigned_and_forged_reports_are_dropped_unparsed() -> None:
    intake, m, _ = make(auth=KEY)
    assert intake.feed(KEY.sign(rep(1)))
    assert not intake.feed(rep(2))  # unsigned
    assert not intake.feed(MessageAuth([b"someone-elses-key-xx"]).sign(rep(3)))
    assert not intake.feed(b"{" * 1000 + b"not even json")  # never reaches the parser
    assert dropped(m, "unsigned") == 3 and dropped(m, "malformed") == 0


def test_stale_future_and_repeated_reports_are_dropped() -> None:
    intake, m, _ = make()
    assert intake.feed(rep(5))
    assert not intake.feed(rep(5))  # the same report again
    assert not intake.feed(rep(6, ts=0.0))
    assert not intake.feed(rep(7, ts=1_000_000_000_000.0))  # year 33658
    assert not intake.feed(rep(8, ts=T0 - 1.5))
    assert intake.feed(rep(4))  # late but within the window, not seen: fine
    assert not intake.feed(rep(4))
    assert intake.feed(rep(500))
    assert not intake.feed(rep(9))  # far behind the newest: below the window
    assert dropped(m, "duplicate") == 3 and dropped(m, "stale") == 3


def test_per_app_budgets_hold_whatever_the_report_rate() -> None:
    intake, m, clock = make(app_budget=1000.0)
    accepted = sum(intake.feed(rep(s, n=100)) for s in range(1, 41))  # 40 reports at once
    assert accepted == 8  # 2 / MIN_INTERVAL reports per second per app
    assert dropped(m, "rate_limited") == 32
    clock.advance(1.0)
    # demand is capped per app per second: 1000 reads/s, not 40 x the per-report cap
    assert sum(intake.feed(rep(100 + s, ts=T0 + 1, n=300)) for s in range(8)) == 3
    assert dropped(m, "budget") == 5
    # another app is not affected by the first one's flood
    assert intake.feed(rep(1, ts=T0 + 1, n=300, app="other"))


def test_per_app_state_is_bounded() -> None:
    intake, _, _ = make(max_apps=100)
    for i in range(1000):
        intake.feed(rep(1, app=f"a{i}"))
    assert len(intake._apps) == 100


def test_health_shows_drops_for_a_while() -> None:
    intake, _, clock = make()
    assert intake.problem() is None
    intake.feed(b"x")
    assert intake.problem() == "reports dropped (malformed)"
    clock.advance(11.0)
    assert intake.problem() is None


def test_the_python_reporter_signs_with_the_reporter_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    intake, m, _ = make(auth=KEY)
    hotset = HotSet(clock=ManualClock(epoch=T0))
    counter = DemandCounter(hotset, "app", NS, ManualClock(epoch=T0), auth=KEY)
    _channel, payload, _n = counter.message("d1", [DemandEntry(b"k", 3)])
    assert KEY.verify(payload) is not None
    assert intake.feed(payload) and dropped(m, "unsigned") == 0
    monkeypatch.setenv("HOTKEYD_DEMAND_KEY", "reporter-key-0123456789")
    assert repr(reporter_key_from_env()) == "MessageAuth(1 key(s))"


def test_a_report_of_1000_typical_entries_fits_the_cap() -> None:
    entries = tuple(
        DemandEntry(f"user:session:{i:016x}:profile".encode(), 123_456) for i in range(1000)
    )
    data = KEY.sign(DemandReport("web-1-3f2a9c01", 1, time.time(), 250, entries).dumps())
    assert len(data) < MAX_REPORT_BYTES < (1 << 20)
