"""Redis restarts and outages: the outcomes docs/idempotency.md promises."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.idempotency import DurableStore, IdempotencyGuard, Outcome
from hotkeyd.idempotency.errors import (
    DuplicateCompletionError,
    IdempotencyUnavailable,
    LeaseLostError,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer


def _done(guard: IdempotencyGuard, key: str) -> None:
    b = guard.begin(key, b"x")
    assert b.lease is not None
    guard.complete(b.lease, b"result")


def test_restart_without_store_forgets_finished_keys(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    guard = IdempotencyGuard(r, namespace=ns)
    _done(guard, "k")
    redis_server.restart()  # no persistence: every record is gone
    assert guard.begin("k", b"x").outcome is Outcome.NEW  # documented: the retry runs again


def test_restart_with_store_replays_finished_keys(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, store: DurableStore
) -> None:
    guard = IdempotencyGuard(r, namespace=ns, store=store)
    _done(guard, "k")
    redis_server.restart()
    b = guard.begin("k", b"x")
    assert b.outcome is Outcome.DONE and b.result == b"result"


def test_restart_mid_operation_fences_the_first_holder(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, store: DurableStore
) -> None:
    guard = IdempotencyGuard(r, namespace=ns, store=store)
    first = guard.begin("k", b"x").lease
    redis_server.restart()  # the PROCESSING record is lost: a retry starts again
    second = guard.begin("k", b"x").lease
    assert first is not None and second is not None
    guard.complete(second, b"second")
    with pytest.raises(LeaseLostError):
        guard.complete(first, b"first")  # one result is kept, the other holder is told
    assert guard.begin("k", b"x").result == b"second"


def test_redis_down_fails_closed_by_default(redis_server: RedisServer, r: redis.Redis) -> None:
    guard = IdempotencyGuard(r)
    redis_server.stop()
    with pytest.raises(IdempotencyUnavailable, match="unreachable"):
        guard.begin("k", b"x")
    assert guard.stats.unavailable == 1


def test_redis_down_fails_open_when_asked(redis_server: RedisServer, r: redis.Redis) -> None:
    guard = IdempotencyGuard(r, on_error="open")
    redis_server.stop()
    b = guard.begin("k", b"x")
    assert b.outcome is Outcome.NEW and b.lease is not None and not b.lease.guarded
    guard.complete(b.lease, b"unrecorded")  # nothing to record, no error
    assert guard.stats.unavailable == 1


def test_restart_between_begin_and_complete_stores_the_result(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, store: DurableStore
) -> None:
    """Redis forgot the PROCESSING record: ``complete`` writes to the store anyway (its
    unique key is the fence), so the retry replays instead of running a second time."""
    guard = IdempotencyGuard(r, namespace=ns, store=store)
    b = guard.begin("k", b"x")
    assert b.lease is not None
    redis_server.restart()
    guard.complete(b.lease, b"first")
    again = guard.begin("k", b"x")
    assert again.outcome is Outcome.DONE and again.result == b"first"
    assert guard.stats.store_replays == 1


def test_async_restart_between_begin_and_complete_stores_the_result(
    redis_server: RedisServer, ns: Namespace, store: DurableStore
) -> None:
    import asyncio

    import redis.asyncio as aioredis

    from hotkeyd.idempotency import AsyncIdempotencyGuard

    async def main() -> None:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # reconnect once after the restart (the sync client does that by default)
        retry = Retry(NoBackoff(), 1)
        client = aioredis.Redis.from_url(
            redis_server.url, retry=retry, retry_on_error=[redis.ConnectionError]
        )
        guard = AsyncIdempotencyGuard(client, namespace=ns, store=store)
        b = await guard.begin("k", b"x")
        assert b.lease is not None
        redis_server.restart()
        await guard.complete(b.lease, b"first")
        assert (await guard.begin("k", b"x")).result == b"first"
        await client.aclose()

    asyncio.run(main())


def test_true_double_completion_raises_duplicate(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, store: DurableStore
) -> None:
    """Two holders both ran (Redis lost the record twice): the store keeps the first result."""
    guard = IdempotencyGuard(r, namespace=ns, store=store)
    first = guard.begin("k", b"x").lease
    redis_server.restart()
    second = guard.begin("k", b"x").lease
    redis_server.restart()
    assert first is not None and second is not None
    guard.complete(second, b"second")
    with pytest.raises(DuplicateCompletionError) as err:
        guard.complete(first, b"first")
    assert err.value.stored == b"second" and guard.stats.duplicates == 1
    assert guard.begin("k", b"x").result == b"second"


def test_without_a_store_a_forgotten_record_is_a_lost_lease(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    guard = IdempotencyGuard(r, namespace=ns)
    b = guard.begin("k", b"x")
    assert b.lease is not None
    redis_server.restart()
    with pytest.raises(LeaseLostError, match="expired"):
        guard.complete(b.lease, b"first")
