"""KeyMemory's per-app demand: the last report per app, bounded, shown for tracked keys."""

from __future__ import annotations

from hotkeyd.detector.config import RateEntry
from hotkeyd.web.memory import KeyMemory


def test_last_report_per_app_shown_only_for_tracked_keys() -> None:
    m = KeyMemory(max_apps=3)
    m.record(100.0, [RateEntry(b"hot", 0, 5000.0, "default", True)])
    m.demand("a", 100.0, 250, [(0, [b"hot", b"never-seen"], [10, 99])], 60)
    m.demand("a", 100.3, 250, [(0, [b"hot"], [20])], 40)  # the app's last report wins
    assert {k: r.n for k, r in m.apps((0, b"hot")).items()} == {"a": 20}
    assert m.apps((0, b"never-seen")) == {}  # not tracked: nothing shown
    assert m.apps((1, b"hot")) == {}  # another database
    for app in ("b", "c", "d"):
        m.demand(app, 101.0, 250, [(0, [b"other", b"hot"], [5, 1])], 40)
    shown = m.apps((0, b"hot"))
    assert list(shown) == ["b", "c", "d"]  # at most max_apps: the most recently heard
    assert {r.n for r in shown.values()} == {1}


def test_reports_kept_are_bounded_by_apps_and_by_bytes() -> None:
    m = KeyMemory(max_reporters=4, max_report_bytes=1000)
    m.record(100.0, [RateEntry(b"hot", 0, 5000.0, "default", True)])
    for i in range(10):
        m.demand(f"app{i}", 100.0, 250, [(0, [b"hot"], [i])], 100)
    assert list(m.apps((0, b"hot"))) == ["app6", "app7", "app8", "app9"]
    assert m.dropped_apps == 6
    m.demand("big", 100.0, 250, [(0, [b"hot"], [99])], 950)  # the others must go
    assert list(m.apps((0, b"hot"))) == ["big"]
    assert m.dropped_apps == 10
    m.demand("huge", 100.0, 250, [(0, [b"hot"], [7])], 5000)  # alone over: still the last
    assert {a: r.n for a, r in m.apps((0, b"hot")).items()} == {"huge": 7}
