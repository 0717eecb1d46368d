"""KeyMemory's per-app demand: the last report per app per tracked key, bounded."""

from __future__ import annotations

from hotkeyd.detector.config import RateEntry
from hotkeyd.web.memory import KeyMemory


def test_last_report_per_app_bounded_and_only_for_tracked_keys() -> None:
    m = KeyMemory(max_apps=3)
    m.record(100.0, [RateEntry(b"hot", 0, 5000.0, "default", True)])
    m.demand("a", 100.0, 250, [(0, b"hot", 10), (0, b"never-seen", 99)])
    m.demand("a", 100.3, 250, [(0, b"hot", 20)])  # the app's last report wins
    assert {k: r.n for k, r in m.apps((0, b"hot")).items()} == {"a": 20}
    assert m.apps((0, b"never-seen")) == {}  # a report cannot grow the memory
    for app in ("b", "c", "d"):
        m.demand(app, 101.0, 250, [(0, b"hot", 1)])
    assert sorted(m.apps((0, b"hot"))) == ["b", "c", "d"]  # "a", least recently heard, went
    assert m.dropped_apps == 1
