"""@idempotent on a plain function."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
import redis.asyncio as aioredis

from hotkeyd.idempotency import (
    AsyncIdempotencyGuard,
    IdempotencyGuard,
    idempotent,
    operation_key,
)
from hotkeyd.idempotency.errors import IdempotencyInProgress, IdempotencyMismatch
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer


def test_runs_once_per_key_and_replays(r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=5, ttl=60)
    calls: list[str] = []

    @idempotent(guard, key=lambda order_id, amount: operation_key("charge", order_id))
    def charge(order_id: str, amount: int) -> dict[str, object]:
        calls.append(order_id)
        return {"order": order_id, "charged": amount}

    assert charge("o-1", 5) == {"order": "o-1", "charged": 5}
    assert charge("o-1", 5) == {"order": "o-1", "charged": 5}
    assert calls == ["o-1"]
    with pytest.raises(IdempotencyMismatch):
        charge("o-1", 6)
    assert charge.__name__ == "charge"


def test_exception_releases_and_concurrent_call_is_in_progress(
    r: redis.Redis, ns: Namespace
) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=5, ttl=60)
    gate = threading.Event()
    attempts: list[int] = []

    @idempotent(guard, key=lambda n: f"job-{n}")
    def job(n: int) -> int:
        attempts.append(n)
        if len(attempts) == 1:
            raise RuntimeError("transient")
        gate.wait(5)
        return n * 2

    with pytest.raises(RuntimeError):
        job(1)
    t = threading.Thread(target=job, args=(1,))
    t.start()
    while len(attempts) < 2:
        pass
    with pytest.raises(IdempotencyInProgress) as info:
        job(1)
    assert info.value.retry_after > 0
    gate.set()
    t.join()
    assert job(1) == 2 and len(attempts) == 2


def test_async_function_with_the_async_guard(redis_server: RedisServer, ns: Namespace) -> None:
    calls: list[int] = []

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        guard = AsyncIdempotencyGuard(client, namespace=ns, lease=5, ttl=60)

        @idempotent(guard, key=lambda n: f"job-{n}")
        async def job(n: int) -> list[int]:
            calls.append(n)
            await asyncio.sleep(0.2)
            return [n, n * 2]

        results = await asyncio.gather(job(3), job(3), return_exceptions=True)
        assert [3, 6] in results  # one of them ran (either may win the race)
        assert any(isinstance(x, IdempotencyInProgress) for x in results)
        assert await job(3) == [3, 6]
        assert calls == [3]

        @idempotent(guard, key=lambda n: f"set-{n}")
        async def unstorable(n: int) -> set[int]:
            calls.append(n)
            return {n}

        for _ in range(2):  # a result encode() cannot store releases the key: runs again
            with pytest.raises(TypeError, match="JSON serializable"):
                await unstorable(4)
        assert calls == [3, 4, 4]
        await client.aclose()

    asyncio.run(main())


def test_guard_kind_must_match_the_function(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match="AsyncIdempotencyGuard"):

        @idempotent(IdempotencyGuard(r), key=lambda: "k")
        async def job() -> None: ...


def test_a_result_that_cannot_be_stored_releases_the_key(r: redis.Redis, ns: Namespace) -> None:
    """encode() failing is an exception of the call: the key is released (as documented),
    not left PROCESSING with nobody to complete it until the lease runs out."""
    guard = IdempotencyGuard(r, namespace=ns, lease=30, ttl=60)
    calls: list[int] = []

    @idempotent(guard, key=lambda n: f"set-{n}")
    def build(n: int) -> set[int]:
        calls.append(n)
        return {n}

    for _ in range(2):  # the retry runs at once: no IdempotencyInProgress for 30 s
        with pytest.raises(TypeError, match="JSON serializable"):
            build(1)
    assert calls == [1, 1]
