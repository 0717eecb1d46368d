"""AsyncHotCache on redis.asyncio: collapse, single-flight, invalidation."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aredis

from hotkeyd.client import AsyncHotCache
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .helpers import FakeDaemon, get_calls

pytestmark = pytest.mark.integration


async def until(cond: object, timeout: float = 5.0) -> bool:
    for _ in range(int(timeout / 0.005)):
        if cond():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.005)
    return bool(cond())  # type: ignore[operator]


def test_async_cache_single_flight_and_invalidation(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    r.set("k", b"v1")
    r.set("cold", b"c")
    r.hset("h", mapping={"f": "1"})

    async def main() -> None:
        clients = [aredis.Redis.from_url(redis_server.url) for _ in range(2)]
        caches = [await AsyncHotCache(c, namespace=ns, wait_timeout=5.0).start() for c in clients]
        a, b = caches
        try:
            daemon.make_hot(b"k", b"h", ttl_ms=60_000)
            assert await until(lambda: all(b"k" in c.hotset and b"h" in c.hotset for c in caches))
            r.config_resetstat()
            assert await asyncio.gather(*(a.get("k") for _ in range(100))) == [b"v1"] * 100
            assert get_calls(r) == 1  # 100 concurrent misses, one Redis GET
            assert await a.cached("k", lambda: asyncio.sleep(0, result="x")) == "x"
            assert await a.hgetall("h") == {b"f": b"1"}
            assert await a.hget("h", "f") == b"1"
            assert await b.get("k") == b"v1"
            assert await a.get("cold") == b"c" and b"cold" not in a.local
            await b.set("k", b"v2")  # b writes: a must drop its copy
            assert await until(lambda: b"k" not in a.local, timeout=0.1)
            assert await a.get("k") == b"v2"
            await a.hset("h", "f", "2")
            assert await until(lambda: b"h" not in b.local, timeout=0.1)
            assert await b.hget("h", "f") == b"2"
        finally:
            for c in caches:
                await c.close()
            for cl in clients:
                await cl.aclose()

    asyncio.run(main())


def test_async_leader_error_reaches_followers(
    redis_server: RedisServer, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"db:1", ttl_ms=60_000)

    async def main() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        cache = await AsyncHotCache(client, namespace=ns, wait_timeout=5.0).start()
        calls = 0

        async def failing() -> int:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.05)
            raise ConnectionError("db down")

        try:
            results = await asyncio.gather(
                *(cache.cached("db:1", failing) for _ in range(20)), return_exceptions=True
            )
            assert calls == 1
            assert all(isinstance(x, ConnectionError) for x in results)
        finally:
            await cache.close()
            await client.aclose()

    asyncio.run(main())
