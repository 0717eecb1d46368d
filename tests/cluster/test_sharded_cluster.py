"""ShardedCounter on a real cluster: 8 processes race for the stock, in both layouts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from redis.cluster import RedisCluster

from hotkeyd.client import PartialTakeError, ShardedCounter
from hotkeyd.testing import RedisClusterServers, RedisServer

pytestmark = pytest.mark.integration

# One buyer process: mixed amounts; on "sold out" it asks for less, and stops when even
# one unit is sold out, then checks that really nothing was left at that moment.
_BUYER = """
import json, sys
from redis.cluster import RedisCluster
from hotkeyd.client import ShardedCounter
url, key, spread, n = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
c = ShardedCounter(RedisCluster.from_url(url), key, shards=8, hash_tag=not spread)
taken, false_sold_out, i = 0, 0, 0
amounts = (1, 2, 3, 5, 1, 4)
while True:
    amount = amounts[(n + i) % len(amounts)]
    i += 1
    if c.take(f"buyer-{n}-{i}", amount) is not None:
        taken += amount
        continue
    if amount > 1:
        continue
    false_sold_out = c.value()  # sold out for 1 unit: nothing may be left, held or free
    break
print(json.dumps({"taken": taken, "left_at_sold_out": false_sold_out}))
"""


@pytest.mark.parametrize("spread", [False, True], ids=["hash-tag", "spread"])
def test_eight_processes_take_exactly_the_stock(
    redis_cluster: RedisClusterServers, unique: str, spread: bool
) -> None:
    key = f"stock:{unique}"
    rc = RedisCluster.from_url(redis_cluster.url)
    counter = ShardedCounter(rc, key, shards=8, hash_tag=not spread)
    counter.set_total(1000)
    if spread:  # the shards really are on different nodes
        assert len({redis_cluster.node_for(k).port for k in counter.keys}) == 3
    assert counter.value() == 1000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUYER, redis_cluster.url, key, "1" if spread else "0", str(n)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results.append(json.loads(out))
    assert sum(r["taken"] for r in results) == 1000  # 0 oversold, none lost
    assert [r["left_at_sold_out"] for r in results] == [0] * 8  # no false sold-out
    assert counter.value() == 0
    assert all(int(rc.get(k) or 0) == 0 for k in counter.keys)
    counter.clear()
    rc.close()


def test_take_gathers_units_spread_one_per_shard(redis_server: RedisServer, unique: str) -> None:
    r = redis.Redis.from_url(redis_server.url)
    c = ShardedCounter(r, f"stock:{unique}", shards=4, hash_tag=False)
    c.set_total(4)  # one unit per shard
    assert c.take("alice", 2) == 2  # no contention, so no false "sold out"
    assert c.take("bob", 3) is None  # short: nothing taken
    assert c.value() == 2
    assert c.take("carol", 2) == 0
    assert c.take("dave", 1) is None
    r.close()


def test_a_failing_shard_leaves_the_stock_untouched(redis_server: RedisServer, unique: str) -> None:
    r = redis.Redis.from_url(redis_server.url)
    c = ShardedCounter(r, f"stock:{unique}", shards=4, hash_tag=False)
    c.set_total(8)
    first = c.shard_of("eve")
    broken = c.keys[(first + 2) % 4]  # reached after two shards were reserved
    r.delete(broken)
    r.rpush(broken, "not a number")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        c.take("eve", 7)
    good = [k for k in c.keys if k != broken]
    assert [int(r.get(k) or 0) for k in good] == [2, 2, 2]  # reservations released
    assert all(r.hlen(h) == 0 for h in c.holds)
    r.close()


def test_a_dead_callers_reservation_returns_after_its_lease(
    redis_server: RedisServer, unique: str
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    c = ShardedCounter(r, f"stock:{unique}", shards=2, hash_tag=False, lease=0.3)
    c.set_total(2)
    # a caller reserved both units and died before committing
    for i in range(2):
        c._reserve(keys=[c.keys[i], c.holds[i]], args=["dead-caller", 1, 300])
    assert c.value() == 2  # held units still count as stock
    assert c.take("frank", 2) == 0  # waits for the lease, then gets both units
    assert c.take("frank", 1) is None
    r.close()


def test_a_commit_that_finds_its_hold_gone_takes_nothing(
    redis_server: RedisServer, unique: str
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    c = ShardedCounter(r, f"stock:{unique}", shards=2, hash_tag=False)
    c.set_total(2)
    c._reserve(keys=[c.keys[0], c.holds[0]], args=["tok", 1, 60_000])
    c._reserve(keys=[c.keys[1], c.holds[1]], args=["tok", 1, 60_000])
    c._settle(keys=[c.keys[1], c.holds[1]], args=["tok", "release"])  # as if expired
    with pytest.raises(PartialTakeError) as info:
        c._commit("tok", {0: 1, 1: 1}, 2)
    assert info.value.taken == 0 and info.value.wanted == 2
    assert c.value() == 2  # the committed unit was given back
    r.close()
