"""HotCache against a real redis-server: load collapse, invalidation, single-flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from hotkeyd.client import ClientMetrics, HotCache, Subscriber
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .helpers import FakeDaemon, get_calls, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server(any_redis_server: RedisServer) -> RedisServer:
    """Every test here runs on redis-server and on valkey-server."""
    return any_redis_server


@pytest.fixture
def cache(redis_server: RedisServer, ns: Namespace, daemon: FakeDaemon) -> Iterator[HotCache]:
    daemon.write_snapshot()
    c = HotCache(redis.Redis.from_url(redis_server.url), namespace=ns, wait_timeout=5.0).start()
    yield c
    c.close()
    c.client.close()


def test_load_collapses_while_hot_and_returns_after_cooling(
    cache: HotCache, r: redis.Redis, daemon: FakeDaemon
) -> None:
    r.set("item:1", b"v")
    n = 500

    def loop() -> int:
        before = get_calls(r)
        for _ in range(n):
            assert cache.get("item:1") == b"v"
        return get_calls(r) - before - 0  # INFO itself is not a GET

    cold = loop()
    daemon.make_hot(b"item:1", ttl_ms=10_000)
    assert wait_until(lambda: b"item:1" in cache.hotset)
    hot = loop()
    daemon.make_cool(b"item:1")
    assert wait_until(lambda: b"item:1" not in cache.hotset)
    after = loop()
    assert cold == n
    assert hot <= n * 0.10, f"{hot} Redis GETs while hot"
    assert after == n
    assert cache.stats.hits >= n - hot


def test_cold_keys_pass_straight_through(cache: HotCache, r: redis.Redis) -> None:
    r.set("cold", b"1")
    assert cache.get("cold") == b"1"
    r.set("cold", b"2")  # written behind the cache's back: a cold key is never stale
    assert cache.get("cold") == b"2"
    assert len(cache.local) == 0


def test_single_flight_100_threads_one_redis_read(
    cache: HotCache, r: redis.Redis, daemon: FakeDaemon
) -> None:
    r.set("flash", b"sale")
    daemon.make_hot(b"flash", ttl_ms=30_000)  # just turned hot: nothing cached yet
    assert wait_until(lambda: b"flash" in cache.hotset)
    r.config_resetstat()
    barrier = threading.Barrier(100)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        results.append(cache.get("flash"))

    threads = [threading.Thread(target=worker) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [b"sale"] * 100
    assert get_calls(r) == 1


def test_invalidation_reaches_every_instance_within_100ms(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    r.set("price", b"old")
    daemon.make_hot(b"price", ttl_ms=60_000)
    caches = [
        HotCache(redis.Redis.from_url(redis_server.url), namespace=ns).start() for _ in range(3)
    ]
    # The writer does not consider the key hot (it missed the announcement): it must
    # broadcast anyway, or the others keep serving the old value (the JD hotkey bug).
    writer = HotCache(redis.Redis.from_url(redis_server.url), namespace=ns).start()
    writer.hotset.clear()
    try:
        assert b"price" not in writer.hotset
        for c in caches:
            assert wait_until(lambda c=c: b"price" in c.hotset)  # type: ignore[misc]
            assert c.get("price") == b"old"
            assert c.get("price") == b"old"
            assert b"price" in c.local  # really served locally
        writer.set("price", b"new")
        t0 = time.monotonic()
        assert wait_until(
            lambda: all(b"price" not in c.local for c in caches), timeout=0.1, interval=0.001
        )
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # and nobody serves the old value afterwards
            assert [c.get("price") for c in caches] == [b"new"] * 3
        assert elapsed <= 0.1
    finally:
        for c in [*caches, writer]:
            c.close()
            c.client.close()


@pytest.mark.parametrize(
    ("op", "check"),
    [
        (lambda c: c.set("k", b"2"), lambda r: r.get("k") == b"2"),
        (lambda c: c.delete("k"), lambda r: r.get("k") is None),
        (lambda c: c.incr("n"), lambda r: r.get("n") == b"11"),
        (lambda c: c.decrby("n", 3), lambda r: r.get("n") == b"7"),
        (lambda c: c.hset("h", "f", "2"), lambda r: r.hget("h", "f") == b"2"),
        (lambda c: c.hdel("h", "f"), lambda r: r.hget("h", "f") is None),
        (lambda c: c.hincrby("h", "n", 5), lambda r: r.hget("h", "n") == b"6"),
        (lambda c: c.expire("k", 100), lambda r: r.ttl("k") > 0),
        (lambda c: c.mset({"k": b"9"}), lambda r: r.get("k") == b"9"),
    ],
)
def test_every_write_invalidates_local_copies(  # type: ignore[no-untyped-def]
    cache: HotCache, r: redis.Redis, daemon: FakeDaemon, op, check
) -> None:
    r.set("k", b"1")
    r.set("n", b"10")
    r.hset("h", mapping={"f": "1", "n": "1"})
    daemon.make_hot(b"k", b"n", b"h", ttl_ms=60_000)
    assert wait_until(lambda: len(cache.hotset) == 3)
    cache.get("k"), cache.get("n"), cache.hget("h", "f"), cache.hgetall("h")
    assert len(cache.local) == 4
    op(cache)
    assert check(r)
    assert len(cache.local) < 4  # the written key's copies are gone at once, locally
    assert wait_until(lambda: cache.subscriber.stats.invalidations >= 1)


def test_mget_hget_hgetall_and_cached(cache: HotCache, r: redis.Redis, daemon: FakeDaemon) -> None:
    r.mset({"a": b"1", "b": b"2", "c": b"3"})
    r.hset("user:1", mapping={"name": "ann", "age": "7"})
    daemon.make_hot(b"a", b"user:1", b"db:row:1", ttl_ms=60_000)
    assert wait_until(lambda: len(cache.hotset) == 3)
    assert cache.mget(["a", "b", "c", "missing"]) == [b"1", b"2", b"3", None]
    r.config_resetstat()
    assert cache.mget("a", "b") == [b"1", b"2"]
    assert get_calls(r, "mget") == 1  # still one MGET for the cold key "b"
    assert cache.mget(["a"]) == [b"1"]
    assert get_calls(r, "mget") == 1  # all hot and cached: no round trip
    assert cache.hget("user:1", "name") == b"ann"
    assert cache.hgetall("user:1") == {b"name": b"ann", b"age": b"7"}
    cache.hgetall("user:1")[b"name"] = b"mutated"  # callers get a copy
    assert cache.hgetall("user:1")[b"name"] == b"ann"
    assert get_calls(r, "hget") == 1 and get_calls(r, "hgetall") == 1
    loads = []
    for _ in range(5):
        assert cache.cached("db:row:1", lambda: loads.append(1) or {"id": 1}) == {"id": 1}  # type: ignore[func-returns-value]
    assert len(loads) == 1
    cache.invalidate("db:row:1")
    cache.cached("db:row:1", lambda: loads.append(1) or {"id": 1})  # type: ignore[func-returns-value]
    assert len(loads) == 2
    assert cache.cached("not-hot", lambda: 42) == 42


def test_local_copy_ttl_follows_the_rule(
    cache: HotCache, r: redis.Redis, daemon: FakeDaemon
) -> None:
    r.set("short", b"1")
    daemon.make_hot(b"short", ttl_ms=150)
    assert wait_until(lambda: b"short" in cache.hotset)
    cache.get("short")
    r.set("short", b"2")  # behind the cache's back: bounded by the 150 ms TTL
    assert wait_until(lambda: cache.get("short") == b"2", timeout=2)


def test_reconnect_drops_local_copies(redis_server: RedisServer, ns: Namespace) -> None:
    r = redis.Redis.from_url(redis_server.url)
    daemon = FakeDaemon(r, ns)
    r.set("k", b"1")
    daemon.make_hot(b"k", ttl_ms=60_000)
    sub = Subscriber(redis.Redis.from_url(redis_server.url), namespace=ns, backoff=(0.02, 0.2))
    cache = HotCache(sub.client, sub).start()
    try:
        assert cache.get("k") == b"1" and len(cache.local) == 1
        redis_server.restart()
        assert wait_until(lambda: sub.stats.reconnects >= 1, timeout=10)
        assert len(cache.local) == 0
    finally:
        sub.stop()
        cache.close()


def test_metrics_on_explicit_registry(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    r.set("m", b"1")
    daemon.make_hot(b"m", ttl_ms=60_000)
    cache = HotCache(redis.Redis.from_url(redis_server.url), namespace=ns, metrics=metrics).start()
    try:
        for _ in range(10):
            cache.get("m")
        cache.set("m", b"2")
        assert wait_until(
            lambda: (registry.get_sample_value("hotkeyd_client_invalidations_total") or 0) >= 1
        )
        assert registry.get_sample_value("hotkeyd_client_local_hits_total") == 9
        assert registry.get_sample_value("hotkeyd_client_local_misses_total") == 1
        assert registry.get_sample_value("hotkeyd_client_refreshes_total") == 1
        assert registry.get_sample_value("hotkeyd_client_hot_keys") == 1
        assert registry.get_sample_value("hotkeyd_client_cache_entries") == 0
    finally:
        cache.close()
        cache.client.close()


def test_hot_entry_of_another_db_is_not_served_locally(cache: HotCache, r: redis.Redis) -> None:
    from hotkeyd.protocol.wire import HotEntry, Message

    r.set("same-name", b"db0")
    entry = HotEntry(key=b"same-name", rate=1e4, rule="r", ttl_ms=60_000, db=3)
    cache.hotset.apply(Message(instance="other-db", seq=1, ts=time.time(), hot=(entry,), full=True))
    assert (b"same-name", 3) in cache.hotset and b"same-name" not in cache.hotset
    assert cache.get("same-name") == b"db0"
    assert cache.mget(["same-name"]) == [b"db0"]
    assert len(cache.local) == 0


def test_unreachable_redis_is_a_clear_error(ns: Namespace) -> None:
    from hotkeyd.errors import UnreachableError
    from hotkeyd.testing import free_port

    cache = HotCache(redis.Redis(port=free_port(), socket_connect_timeout=0.2), namespace=ns)
    try:
        with pytest.raises(UnreachableError, match="not ready"):
            cache.start(timeout=0.5)
    finally:
        cache.close()
