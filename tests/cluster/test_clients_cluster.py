"""Every client API on a real Redis Cluster, fed by a daemon tapping all primaries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as aredis
from redis.cluster import RedisCluster

from hotkeyd.client import AsyncHotCache, AsyncSubscriber, HotCache, Subscriber
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisClusterServers
from tests.client.helpers import wait_until

from .helpers import get_calls, key_on, tap_daemon

pytestmark = pytest.mark.integration


def _hammer_until_hot(apps: list[HotCache], key: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(key.encode() in a.hotset for a in apps):
        assert time.monotonic() < deadline, "the key never turned hot in every app"
        for a in apps:
            for _ in range(20):
                a.get(key)
        time.sleep(0.005)


def _read_until_hot(rc: RedisCluster, ns: Namespace, key: str) -> None:
    with Subscriber(rc, namespace=ns) as sub:
        deadline = time.monotonic() + 20
        while key.encode() not in sub.hotset:
            assert time.monotonic() < deadline, "the key never turned hot"
            for _ in range(50):
                rc.get(key)
            time.sleep(0.005)


@pytest.mark.parametrize("sharded", [False, True], ids=["publish", "spublish"])
def test_two_hotcache_apps_serve_a_key_of_node_2_locally(
    redis_cluster: RedisClusterServers, unique: str, tmp_path: Path, sharded: bool
) -> None:
    ns = Namespace(f"hk{unique}", sharded=sharded)
    node2 = redis_cluster.nodes[2]
    key = key_on(redis_cluster, node2, f"item-{unique}")
    extra = ("--sharded-pubsub",) if sharded else ()
    with tap_daemon(redis_cluster, ns.prefix, tmp_path, *extra) as daemon:
        apps = [
            HotCache(RedisCluster.from_url(redis_cluster.nodes[i].url), namespace=ns).start()
            for i in range(2)
        ]
        try:
            apps[0].set(key, b"v1")
            _hammer_until_hot(apps, key)
            before = get_calls(node2)
            reads = 0
            for _ in range(1000):
                for a in apps:
                    assert a.get(key) == b"v1"
                    reads += 1
            served_by_redis = get_calls(node2) - before
            assert served_by_redis <= 0.02 * reads, (served_by_redis, reads)
            # the reads served locally reach the daemon as demand reports (SPUBLISH too)
            assert wait_until(
                lambda: daemon.metric("hotkeyd_demand_local_accesses_total") >= reads - 10,
                timeout=5.0,
            ), daemon.metric("hotkeyd_demand_local_accesses_total")

            apps[0].set(key, b"v2")  # the writer drops its copy; the other hears of it
            t0 = time.monotonic()
            assert wait_until(lambda: apps[1].get(key) == b"v2", timeout=2.0, interval=0.001)
            assert time.monotonic() - t0 < 0.1
            assert daemon.metric("hotkeyd_publish_failures_total") == 0
        finally:
            for a in apps:
                a.close()
                a.client.close()


def test_async_clients_on_an_uninitialized_async_cluster(
    redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    ns = Namespace(f"hk{unique}")
    key = key_on(redis_cluster, redis_cluster.nodes[0], f"aio-{unique}")

    async def main() -> None:
        writer = aredis.RedisCluster.from_url(redis_cluster.url)  # never initialize()d
        reader = aredis.RedisCluster.from_url(redis_cluster.nodes[2].url)
        sub = AsyncSubscriber(aredis.RedisCluster.from_url(redis_cluster.url), namespace=ns)
        async with (
            AsyncHotCache(writer, namespace=ns) as a,
            AsyncHotCache(reader, namespace=ns) as b,
            sub,
        ):
            await a.set(key, b"v1")
            deadline = time.monotonic() + 20
            while key.encode() not in b.hotset or key.encode() not in sub.hotset:
                assert time.monotonic() < deadline, "never hot"
                await asyncio.gather(*(b.get(key) for _ in range(30)))
                await asyncio.sleep(0.005)
            assert await b.get(key) == b"v1"
            await a.set(key, b"v2")
            t0 = time.monotonic()
            while await b.get(key) != b"v2":
                assert time.monotonic() - t0 < 2
                await asyncio.sleep(0.001)
            assert time.monotonic() - t0 < 0.1
        for c in (writer, reader, sub.client):
            await c.aclose()

    with tap_daemon(redis_cluster, ns.prefix, tmp_path):
        asyncio.run(main())


def test_subscriber_bootstraps_from_the_snapshot_on_a_cluster(
    redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    ns = Namespace(f"hk{unique}")
    key = key_on(redis_cluster, redis_cluster.nodes[1], f"boot-{unique}")
    with tap_daemon(redis_cluster, ns.prefix, tmp_path):
        rc = RedisCluster.from_url(redis_cluster.url)
        try:
            _read_until_hot(rc, ns, key)
            for _ in range(50):
                rc.get(key)
            # a late subscriber learns the key from the snapshot alone
            with Subscriber(rc, namespace=ns) as late:
                assert key.encode() in late.hotset
                assert late.stats.resyncs >= 1
        finally:
            rc.close()


# What `hotkeyd top` needs on a cluster, and nothing that writes (docs/client.md#acl).
TOP_ACL = "+zrevrangebyscore +mget +info +command +cluster|slots +cluster|shards +ping +hello"


def test_top_reads_a_cluster_as_a_read_only_user(
    redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    import redis

    ns = Namespace(f"hk{unique}")
    user = f"top{unique}"
    for node in redis_cluster.nodes:
        with redis.Redis(port=node.port) as admin:
            admin.execute_command(
                "ACL", "SETUSER", user, "on", ">pw", f"~{{{ns.prefix}}}:*", *TOP_ACL.split()
            )
    key = key_on(redis_cluster, redis_cluster.nodes[2], f"top-{unique}")
    url = f"redis://{user}:pw@127.0.0.1:{redis_cluster.nodes[0].port}/0"
    with tap_daemon(redis_cluster, ns.prefix, tmp_path):
        rc = RedisCluster.from_url(redis_cluster.url)
        try:
            _read_until_hot(rc, ns, key)
        finally:
            rc.close()
        out = subprocess.run(
            [sys.executable, "-m", "hotkeyd", "top", "--json", "--redis-url", url,
             "--namespace", ns.prefix],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert key in [e["key"] for e in doc["hot"]]
    assert len(doc["instances"]) == 1
