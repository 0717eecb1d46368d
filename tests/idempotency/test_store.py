"""The durable backstop on sqlite3 and a real PostgreSQL."""

from __future__ import annotations

import threading

import pytest
import redis

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency import DurableStore, IdempotencyGuard, Outcome, StoredFinal
from hotkeyd.idempotency.errors import DuplicateCompletionError
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer


def test_put_get_and_the_unique_key(store: DurableStore) -> None:
    assert store.get("d1") is None
    first = StoredFinal("d1", "key-1", "fp", False, 7, b"\x00\xffbytes")
    assert store.put(first) == first
    assert store.get("d1") == first
    second = StoredFinal("d1", "key-1", "fp", True, 8, b"other")
    assert store.put(second) == first  # the unique key keeps the first final result


def test_concurrent_puts_keep_exactly_one(store: DurableStore) -> None:
    winners: list[StoredFinal] = []

    def put(i: int) -> None:
        winners.append(store.put(StoredFinal("race", "k", "fp", False, i, str(i).encode())))

    ts = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len({w.token for w in winners}) == 1
    assert store.get("race") == winners[0]


def test_guard_replays_from_the_store_after_redis_forgot(
    store: DurableStore, r: redis.Redis, ns: Namespace
) -> None:
    guard = IdempotencyGuard(r, namespace=ns, store=store, lease=5, ttl=60)
    b = guard.begin("order-9", b"body")
    assert b.lease is not None
    guard.complete(b.lease, b"order #1")
    r.flushall()  # what a failover to a lagging replica looks like to the guard
    again = guard.begin("order-9", b"body")
    assert again.outcome is Outcome.DONE and again.result == b"order #1"
    assert r.exists(b.lease.record)  # written back: the next retry needs no SQL
    assert guard.begin("order-9", b"other").outcome is Outcome.MISMATCH
    r.flushall()
    assert guard.begin("order-9", b"other").outcome is Outcome.MISMATCH  # from the store
    assert guard.begin("order-9", b"body").outcome is Outcome.DONE


def test_split_brain_duplicate_is_caught_by_the_unique_key(
    store: DurableStore, redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    with RedisServer() as other:  # two primaries that both think they own the key
        r2 = redis.Redis.from_url(other.url)
        a = IdempotencyGuard(r, namespace=ns, store=store)
        b = IdempotencyGuard(r2, namespace=ns, store=store)
        la, lb = a.begin("k", b"x").lease, b.begin("k", b"x").lease
        assert la is not None and lb is not None
        a.complete(la, b"first")
        with pytest.raises(DuplicateCompletionError) as info:
            b.complete(lb, b"second")
        assert info.value.stored == b"first"
        assert b.begin("k", b"x").result == b"first"  # Redis repaired to the kept result
        r2.close()


def test_bad_table_name() -> None:
    with pytest.raises(ConfigError):
        DurableStore(lambda: None, table="x; drop table y")
