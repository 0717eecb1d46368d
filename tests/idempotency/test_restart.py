"""Redis restarts and outages: the outcomes docs/idempotency.md promises."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.idempotency import DurableStore, IdempotencyGuard, Outcome
from hotkeyd.idempotency.errors import IdempotencyUnavailable, LeaseLostError
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
