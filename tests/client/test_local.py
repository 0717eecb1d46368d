"""LocalCache: bounds, single-flight, logical expiry, invalidation vs refresh races."""

from __future__ import annotations

import threading
import time

import pytest

from hotkeyd.client import LocalCache
from hotkeyd.clock import ManualClock


def test_entry_bound_evicts_least_recently_used() -> None:
    c = LocalCache(max_entries=3, max_bytes=1 << 20, clock=ManualClock())
    for i in range(3):
        c.load(("g", i), f"k{i}".encode(), lambda i=i: f"v{i}", ttl=10)  # type: ignore[misc]
    assert c.get_fresh(("g", 0), 1000.0)[0]  # touch 0: now 1 is the oldest
    c.load(("g", 3), b"k3", lambda: "v3", ttl=10)
    assert len(c) == 3
    assert not c.get_fresh(("g", 1), 1000.0)[0]
    assert c.get_fresh(("g", 0), 1000.0)[0]
    assert c.stats.evictions == 1
    assert b"k1" not in c  # the index follows evictions


def test_byte_bound_holds_whatever_the_values() -> None:
    c = LocalCache(max_entries=10_000, max_bytes=20_000, clock=ManualClock())
    for i in range(200):
        c.load(("g", i), f"k{i}".encode(), lambda: b"x" * 1000, ttl=10)
    assert c.nbytes <= 20_000
    assert 0 < len(c) < 200


def test_value_too_big_is_served_but_not_cached() -> None:
    c = LocalCache(max_entries=10, max_bytes=8000, clock=ManualClock())
    assert c.load(("g", 1), b"k", lambda: b"x" * 5000, ttl=10) == b"x" * 5000
    assert len(c) == 0 and c.stats.too_big == 1


def test_entries_expire_with_the_clock() -> None:
    clock = ManualClock()
    c = LocalCache(clock=clock)
    calls = []
    loader = lambda: calls.append(1) or len(calls)  # type: ignore[func-returns-value]  # noqa: E731
    assert c.load("ck", b"k", loader, ttl=1.0) == 1
    assert c.load("ck", b"k", loader, ttl=1.0) == 1
    clock.advance(1.5)
    assert c.load("ck", b"k", loader, ttl=1.0) == 2


def test_single_flight_one_loader_for_many_threads() -> None:
    c = LocalCache(wait_timeout=10.0)
    calls = 0
    gate = threading.Event()

    def loader() -> bytes:
        nonlocal calls
        calls += 1
        gate.wait(5)
        return b"value"

    results: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: results.append(c.load("ck", b"k", loader, 5.0)))
        for _ in range(50)
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert calls == 1
    assert results == [b"value"] * 50
    assert c.stats.refreshes == 1


def test_stale_value_served_while_one_caller_refreshes() -> None:
    clock = ManualClock()
    c = LocalCache(clock=clock, stale_for=5.0)
    c.load("ck", b"k", lambda: "old", ttl=1.0)
    clock.advance(2.0)  # expired, but within stale_for
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "new"

    leader = threading.Thread(target=lambda: c.load("ck", b"k", slow, 1.0))
    leader.start()
    assert started.wait(5)
    assert c.load("ck", b"k", lambda: pytest.fail("second refresh"), 1.0) == "old"
    assert c.stats.stale_hits == 1
    release.set()
    leader.join(5)
    assert c.load("ck", b"k", lambda: pytest.fail("should be fresh"), 1.0) == "new"


def test_waiters_see_the_leaders_error() -> None:
    c = LocalCache(wait_timeout=5.0)
    started, release = threading.Event(), threading.Event()

    def failing() -> str:
        started.set()
        release.wait(5)
        raise ConnectionError("redis down")

    errors: list[BaseException] = []

    def run(fn: object) -> None:
        try:
            c.load("ck", b"k", fn, 1.0)  # type: ignore[arg-type]
        except ConnectionError as exc:
            errors.append(exc)

    leader = threading.Thread(target=run, args=(failing,))
    leader.start()
    assert started.wait(5)
    follower = threading.Thread(target=run, args=(lambda: pytest.fail("no second load"),))
    follower.start()
    time.sleep(0.1)
    release.set()
    leader.join(5)
    follower.join(5)
    assert len(errors) == 2


def test_invalidation_during_refresh_prevents_caching_the_old_value() -> None:
    c = LocalCache()
    started, release = threading.Event(), threading.Event()

    def slow_old() -> str:
        started.set()
        release.wait(5)
        return "old"  # read before the write that the invalidation announces

    t = threading.Thread(target=lambda: c.load("ck", b"k", slow_old, 10.0))
    t.start()
    assert started.wait(5)
    c.invalidate(b"k")
    release.set()
    t.join(5)
    assert len(c) == 0
    assert c.load("ck", b"k", lambda: "new", 10.0) == "new"


def test_invalidate_drops_every_entry_of_a_redis_key() -> None:
    c = LocalCache()
    c.load(("h", b"h1", b"f1"), b"h1", lambda: "a", 10)
    c.load(("h", b"h1", b"f2"), b"h1", lambda: "b", 10)
    c.load(("H", b"h1"), b"h1", lambda: {"f1": "a"}, 10)
    c.load(("g", b"other"), b"other", lambda: "x", 10)
    assert c.invalidate(b"h1") == 3
    assert len(c) == 1 and b"other" in c


def test_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError):
        LocalCache(max_entries=0)
