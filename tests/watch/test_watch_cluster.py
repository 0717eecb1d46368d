"""The watch on a 3-primary Redis Cluster: one watch per primary, each key armed on the
primary that owns its slot; a direct write on any primary drops the apps' copies."""

from __future__ import annotations

import time
from functools import partial

import pytest
from redis.cluster import RedisCluster

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisClusterServers
from hotkeyd.testing.daemon import DaemonProcess
from tests.client.helpers import wait_until

from .test_watch import BOUND, _Load
from .test_watch import _dropped_within as _dropped

pytestmark = pytest.mark.integration


def _gone(cache: HotCache, key: bytes) -> bool:
    return key not in cache.local


def test_direct_writes_on_every_primary_drop_the_copies(
    redis_cluster: RedisClusterServers,
) -> None:
    keys: dict[int, bytes] = {}
    i = 0
    while len(keys) < 3:  # one key per primary
        k = b"w:%d" % i
        keys.setdefault(redis_cluster.node_for(k).port, k)
        i += 1
    data = RedisCluster.from_url(redis_cluster.url)
    for k in keys.values():
        data.set(k, b"v0")
    with DaemonProcess("--redis-url", redis_cluster.url, "--window", "0.5") as d, _Load(
        d, dict.fromkeys(keys.values(), 3000.0)
    ):  # fmt: skip
        cache = HotCache.from_url(redis_cluster.url)
        try:
            assert wait_until(lambda: d.metric("hotkeyd_watch_up") == 3, timeout=10), d.stderr
            assert wait_until(lambda: all(k in cache.hotset for k in keys.values()), timeout=10)
            assert wait_until(lambda: d.metric("hotkeyd_watch_keys") == 3, timeout=5)
            for port in keys:  # armed where the slot lives: one key per node
                assert d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{port}") == 1
            time.sleep(0.05)
            for k in keys.values():
                cache.get(k)
            assert wait_until(lambda: all(k in cache.local for k in keys.values()), timeout=2)
            for k in keys.values():
                t0 = time.perf_counter()
                data.set(k, b"v1")
                assert wait_until(partial(_gone, cache, k), timeout=BOUND), d.stderr
                print(f"cluster: {k!r} dropped in {(time.perf_counter() - t0) * 1000:.2f} ms")
            assert "Traceback" not in d.stderr, d.stderr
        finally:
            cache.close()
            data.close()


def test_a_failover_moves_the_watch_to_the_new_primary(
    own_redis_cluster: RedisClusterServers,
) -> None:
    cluster = own_redis_cluster
    key = b"w:failover"
    data = RedisCluster.from_url(cluster.url)
    data.set(key, b"v0")
    with DaemonProcess("--redis-url", cluster.url, "--window", "0.5") as d, _Load(
        d, {key: 3000.0}
    ):  # fmt: skip
        cache = HotCache.from_url(cluster.url)
        try:
            old = cluster.node_for(key)
            assert wait_until(
                lambda: d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{old.port}") == 1,
                timeout=10,
            ), d.stderr
            new = cluster.failover(old)
            # the topology is re-read (MOVED, a lost node, or every TOPOLOGY_REFRESH s)
            assert wait_until(
                lambda: d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{new.port}") == 1,
                timeout=10,
            ), d.stderr
            data.close()
            data = RedisCluster.from_url(cluster.url)
            time.sleep(0.1)
            took = _dropped(cache, key, partial(data.set, key, b"v1"))
            print(f"after failover: dropped in {took * 1000:.2f} ms")
            assert took < BOUND
        finally:
            cache.close()
            data.close()
