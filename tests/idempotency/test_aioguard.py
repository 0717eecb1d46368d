"""AsyncIdempotencyGuard: the same records and answers as the thread guard."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

from hotkeyd.idempotency import (
    AsyncIdempotencyGuard,
    DurableStore,
    IdempotencyGuard,
    Outcome,
)
from hotkeyd.idempotency.errors import (
    DuplicateCompletionError,
    IdempotencyUnavailable,
    LeaseLostError,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer


def test_async_and_thread_guards_share_records(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    sync = IdempotencyGuard(r, namespace=ns, lease=5, ttl=10)

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        guard = AsyncIdempotencyGuard(client, namespace=ns, lease=5, ttl=10)
        short = AsyncIdempotencyGuard(client, namespace=ns, lease=0.3, ttl=10)
        b = await guard.begin("k", b"x")
        assert b.outcome is Outcome.NEW and b.lease is not None
        assert sync.begin("k", b"x").outcome is Outcome.IN_PROGRESS
        assert (await guard.begin("k", b"y")).outcome is Outcome.MISMATCH
        waiter = asyncio.create_task(guard.begin("k", b"x", wait=5))
        await asyncio.sleep(0.05)
        await guard.complete(b.lease, b"async result")
        assert (await waiter).result == b"async result"
        assert sync.begin("k", b"x").result == b"async result"
        # takeover and fencing
        old = (await short.begin("k2", b"x")).lease
        await asyncio.sleep(0.4)
        new = await short.begin("k2", b"x")
        assert new.takeover and new.lease is not None and old is not None
        with pytest.raises(LeaseLostError):
            await short.complete(old, b"late")
        await short.extend(new.lease)
        await short.release(new.lease)
        assert (await short.begin("k2", b"x")).outcome is Outcome.NEW
        await client.aclose()

    asyncio.run(main())


def test_async_guard_with_store(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, store: DurableStore
) -> None:
    async def main() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        guard = AsyncIdempotencyGuard(client, namespace=ns, store=store)
        b = await guard.begin("k", b"x")
        assert b.lease is not None
        await guard.complete(b.lease, b"kept")
        await client.flushall()
        replay = await guard.begin("k", b"x")
        assert replay.outcome is Outcome.DONE and replay.result == b"kept"
        await client.flushall()
        assert (await guard.begin("k", b"other")).outcome is Outcome.MISMATCH
        # a second completion (the record was lost in between) hits the unique key
        await client.flushall()
        with RedisServer() as other:
            c2 = aioredis.Redis.from_url(other.url)
            g2 = AsyncIdempotencyGuard(c2, namespace=ns, store=None)
            lb = (await g2.begin("k3", b"x")).lease
            la = (await guard.begin("k3", b"x")).lease
            assert la is not None and lb is not None
            await guard.complete(la, b"first")
            g2.store = store
            with pytest.raises(DuplicateCompletionError):
                await g2.complete(lb, b"second")
            await c2.aclose()
        await client.aclose()

    asyncio.run(main())


def test_async_guard_fails_closed_and_open(redis_server: RedisServer) -> None:
    async def main() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        closed = AsyncIdempotencyGuard(client)
        opened = AsyncIdempotencyGuard(client, on_error="open")
        redis_server.stop()
        with pytest.raises(IdempotencyUnavailable):
            await closed.begin("k", b"x")
        b = await opened.begin("k", b"x")
        assert b.lease is not None and not b.lease.guarded
        await opened.complete(b.lease, b"unrecorded")
        await client.aclose()

    asyncio.run(main())


def test_async_keepalive_renews_the_lease(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    """``async with KeepAlive(...)`` renews in a task: a 0.3 s lease outlives 0.8 s of work."""
    from hotkeyd.idempotency import KeepAlive

    sync = IdempotencyGuard(r, namespace=ns, lease=0.3, ttl=10)

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        guard = AsyncIdempotencyGuard(client, namespace=ns, lease=0.3, ttl=10)
        b = await guard.begin("long", b"x")
        assert b.lease is not None
        async with KeepAlive(guard, b.lease, every=0.05) as ka:
            await asyncio.sleep(0.8)
            assert sync.begin("long", b"x").outcome is Outcome.IN_PROGRESS
        assert ka.beats >= 5 and not ka.lost.is_set()
        await guard.complete(b.lease, b"once")
        # a taken-over lease: the keep-alive notices and stops
        b2 = await guard.begin("taken", b"x")
        assert b2.lease is not None
        async with KeepAlive(guard, b2.lease, every=0.05) as ka:
            await client.hset(b2.lease.record, "tok", "1")  # what a takeover does to the token
            await asyncio.sleep(0.3)
        assert ka.lost.is_set()
        await client.aclose()

    asyncio.run(main())
    assert sync.begin("long", b"x").result == b"once"


def test_async_keepalive_exits_when_a_renewal_swallows_the_cancel(
    redis_server: RedisServer, ns: Namespace
) -> None:
    """A cancel landing inside a renewal can come out as a Redis error (the client's read
    timeout racing it) and be lost; leaving ``async with`` still returns at once. Before,
    the task went on renewing and the exit waited for ever."""
    from hotkeyd.idempotency import IdempotencyError, KeepAlive

    async def main() -> float:
        client = aioredis.Redis.from_url(redis_server.url)
        guard = AsyncIdempotencyGuard(client, namespace=ns, lease=0.3, ttl=10)
        b = await guard.begin("swallowed", b"x")
        assert b.lease is not None
        entered = asyncio.Event()

        async def extend(lease: object) -> None:
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                raise IdempotencyError("Redis unreachable: Timeout reading from socket") from None

        guard.extend = extend  # type: ignore[method-assign,assignment]
        ka = KeepAlive(guard, b.lease, every=0.05)
        await ka.__aenter__()
        await asyncio.wait_for(entered.wait(), 5)
        t0 = time.monotonic()
        await asyncio.wait_for(ka.__aexit__(None, None, None), 5)
        await client.aclose()
        return time.monotonic() - t0

    took = asyncio.run(main())
    assert took < 1.0, f"leaving the keep-alive took {took:.1f} s"


def test_sync_keepalive_refuses_an_async_guard(redis_server: RedisServer, ns: Namespace) -> None:
    """The thread keep-alive would only create coroutines nobody awaits (the old bug)."""
    from hotkeyd.idempotency import KeepAlive
    from hotkeyd.idempotency.outcome import Lease

    guard = AsyncIdempotencyGuard(aioredis.Redis.from_url(redis_server.url), namespace=ns)
    with pytest.raises(TypeError, match="async with"), KeepAlive(guard, Lease("k", "r", 1)):
        pass
