"""ShardedCounter: stable routing, sums, and no overselling under concurrency."""

from __future__ import annotations

import threading

import mmh3
import pytest
import redis

from hotkeyd.client import ShardedCounter
from hotkeyd.testing import RedisServer

pytestmark = pytest.mark.integration


def test_routing_is_a_stable_mmh3_hash(r: redis.Redis, unique: str) -> None:
    c = ShardedCounter(r, f"likes:{unique}", shards=8)
    assert c.shard_of("user-42") == mmh3.hash(b"user-42", 0x5EED, signed=False) % 8
    assert c.keys[0] == f"{{likes:{unique}}}:0"  # hash tag: one cluster slot


def test_incr_decr_and_sum_in_one_mget(r: redis.Redis, unique: str) -> None:
    c = ShardedCounter(r, f"likes:{unique}", shards=4)
    for i in range(100):
        c.incr(f"user-{i}")
    c.decr("user-1", 3)
    assert c.value() == 97
    used = sum(1 for k in c.keys if r.get(k) is not None)
    assert used > 1  # the writes really spread


@pytest.mark.parametrize("hash_tag", [True, False])
def test_take_never_oversells_across_threads_and_clients(
    redis_server: RedisServer, unique: str, hash_tag: bool
) -> None:
    stock = 300
    clients = [redis.Redis.from_url(redis_server.url) for _ in range(4)]
    counters = [
        ShardedCounter(cl, f"stock:{unique}", shards=8, hash_tag=hash_tag) for cl in clients
    ]
    counters[0].set_total(stock)
    sold: list[int] = []
    lock = threading.Lock()

    def buyer(n: int) -> None:
        c = counters[n % len(counters)]
        mine = 0
        for i in range(60):
            amount = 1 + (i % 3)
            if c.take(f"buyer-{n}-{i}", amount) is not None:
                mine += amount
        with lock:
            sold.append(mine)

    threads = [threading.Thread(target=buyer, args=(n,)) for n in range(12)]  # asks ~1440 > 300
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(sold) == stock  # everything sold, nothing oversold
    assert counters[0].value() == 0
    assert all(int(clients[0].get(k) or 0) >= 0 for k in counters[0].keys)
    for cl in clients:
        cl.close()


def test_take_gathers_stock_spread_over_shards(r: redis.Redis, unique: str) -> None:
    c = ShardedCounter(r, f"stock:{unique}", shards=4)
    c.set_total(4)  # one unit per shard
    assert c.take("x", 3) == 1  # no single shard has 3: the script gathers them
    assert c.take("y", 2) is None
    assert c.value() == 1


def test_bad_arguments(r: redis.Redis) -> None:
    with pytest.raises(ValueError):
        ShardedCounter(r, "k", shards=0)
    c = ShardedCounter(r, "k", shards=2)
    with pytest.raises(ValueError):
        c.take("x", 0)
    with pytest.raises(ValueError):
        c.set_total(-1)
