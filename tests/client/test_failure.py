"""The failure contract (spec/failure.md): each scenario of spec/vectors/failure.json,
against a real redis-server, as the Go, Java and Node clients run them too."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from hotkeyd.client import AsyncHotCache, HotCache, Subscriber
from hotkeyd.errors import UnreachableError
from hotkeyd.protocol.limits import START_TIMEOUT_MS
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer, free_port

from .helpers import FakeDaemon, wait_until
from .test_aiocache import until

pytestmark = pytest.mark.integration

VECTORS = Path(__file__).resolve().parents[2] / "spec" / "vectors" / "failure.json"


def scenario(name: str) -> dict[str, Any]:
    for s in json.loads(VECTORS.read_text("utf-8"))["scenarios"]:
        if s["name"] == name:
            return dict(s)
    raise AssertionError(f"no scenario {name} in {VECTORS}")


def test_start_with_redis_down_raises_within_the_bound(ns: Namespace) -> None:
    sc = scenario("start_redis_down")
    assert START_TIMEOUT_MS == 5000
    bound = sc["test_bound_ms"] / 1000
    cache = HotCache(redis.Redis(port=free_port(), socket_connect_timeout=0.2), namespace=ns)
    t0 = time.monotonic()
    with pytest.raises(UnreachableError, match="not ready"):
        cache.start(timeout=bound)
    assert time.monotonic() - t0 <= bound + sc["slack_ms"] / 1000


def test_lost_subscription_drops_every_copy_and_the_reconnect_resyncs(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    lost, again = scenario("subscription_lost"), scenario("reconnect")
    r.set("k", b"old")
    sub = Subscriber(redis.Redis.from_url(redis_server.url), namespace=ns, backoff=(0.02, 0.2))
    cache = HotCache(sub.client, sub).start()
    try:
        daemon.make_hot(b"k", ttl_ms=60_000)
        assert wait_until(lambda: b"k" in cache.hotset)
        assert cache.get("k") == b"old"
        st = (sub.stats.lost, sub.stats.connects, sub.stats.resyncs)
        r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        r.set("k", b"new")  # not announced
        assert wait_until(lambda: sub.stats.lost > st[0], timeout=lost["slack_ms"] / 1000)
        assert cache.get("k") == b"new", "a copy from before the loss was served"
        assert wait_until(
            lambda: sub.stats.connects > st[1] and sub.stats.resyncs > st[2],
            timeout=(again["bound_ms"] + again["slack_ms"]) / 1000,
        )
        daemon.make_hot(b"k2", ttl_ms=60_000)
        assert wait_until(lambda: b"k2" in cache.hotset)
    finally:
        sub.stop()
        cache.close()
        sub.client.close()


def test_a_stopped_daemons_keys_expire_by_their_ttl(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    sc = scenario("daemon_stopped")
    r.set("k", b"old")
    cache = HotCache(redis.Redis.from_url(redis_server.url), namespace=ns).start()
    try:
        daemon.make_hot(b"k", ttl_ms=sc["test_ttl_ms"])  # and then the daemon says nothing
        assert wait_until(lambda: b"k" in cache.hotset)
        assert cache.get("k") == b"old"
        t0 = time.monotonic()
        r.set("k", b"new")  # not announced
        limit = (sc["test_ttl_ms"] + sc["slack_ms"]) / 1000
        assert wait_until(lambda: b"k" not in cache.hotset, timeout=limit)
        assert cache.get("k") == b"new"
        assert time.monotonic() - t0 <= limit
        age_ms = (time.time() - cache.subscriber.stats.last_notification) * 1000
        assert age_ms >= sc["test_ttl_ms"], "the stats do not show the daemon's silence"
    finally:
        cache.close()
        cache.client.close()


def test_async_cache_drops_copies_when_the_subscription_is_lost(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    r.set("k", b"old")

    async def main() -> None:
        cache = await AsyncHotCache(aredis.Redis.from_url(redis_server.url), namespace=ns).start()
        try:
            daemon.make_hot(b"k", ttl_ms=60_000)
            assert await until(lambda: b"k" in cache.hotset)
            assert await cache.get("k") == b"old"
            lost = cache.subscriber.stats.lost
            r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            r.set("k", b"new")  # not announced
            assert await until(lambda: cache.subscriber.stats.lost > lost)
            assert await cache.get("k") == b"new", "a copy from before the loss was served"
        finally:
            await cache.close()
            await cache.client.aclose()

    asyncio.run(main())
