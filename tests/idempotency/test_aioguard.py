"""AsyncIdempotencyGuard: the same records and answers as the thread guard."""

from __future__ import annotations

import asyncio

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
