"""A live reshard (MOVED/ASK) and a replica failover under two HotCache apps and a daemon.

Notifications must continue, writes through one app must reach the other's cache within
100 ms before, during and after, and reads of the hot key stay local.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from hotkeyd.client import HotCache
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisClusterServers
from tests.client.helpers import wait_until

from .helpers import key_on, tap_daemon

pytestmark = pytest.mark.integration


class _Load(threading.Thread):
    """GETs of ``key`` from a client without the SDK, so the daemon keeps it hot."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.client = RedisCluster.from_url(url)
        self.key = key
        self.halt = threading.Event()
        self.errors = 0

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                for _ in range(10):
                    self.client.get(self.key)
            except Exception:  # a failover in progress; the SDK is what is under test
                self.errors += 1
            time.sleep(0.02)
        self.client.close()


def test_reshard_and_failover_keep_notifications_and_caches_correct(
    own_redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    cl = own_redis_cluster
    dst = cl.nodes[0]
    # the daemon's own keys live on the node that fails over, too
    prefix = key_on(cl, dst, f"hk{unique}").replace(":", "-")
    ns = Namespace(prefix)
    while cl.node_for(ns.instances) is not dst:
        prefix += "x"
        ns = Namespace(prefix)
    key = key_on(cl, cl.nodes[2], f"topo-{unique}")
    with tap_daemon(cl, ns.prefix, tmp_path, nodes=len(cl.nodes)) as daemon:
        load = _Load(cl.url, key)
        apps = [HotCache(RedisCluster.from_url(cl.nodes[i].url), namespace=ns) for i in (1, 2)]
        for a in apps:
            a.start()
        load.start()
        try:
            apps[0].set(key, b"v0")
            assert wait_until(lambda: all(key.encode() in a.hotset for a in apps), 20)

            def write_seen_within_100ms(value: bytes) -> None:
                assert apps[1].get(key) is not None  # the reader holds a copy
                apps[0].set(key, value)
                t0 = time.monotonic()
                assert wait_until(lambda: apps[1].get(key) == value, 2.0, 0.001), value
                assert time.monotonic() - t0 < 0.1, value

            write_seen_within_100ms(b"before")

            # live reshard: keys move under ASK, then every node says MOVED
            stop = threading.Event()
            seen: list[bytes | None] = []

            def reader() -> None:
                while not stop.is_set():
                    seen.append(apps[1].get(key))

            t = threading.Thread(target=reader)
            t.start()
            cl.migrate_slot(key_slot(key.encode()), dst, pause=0.3)
            stop.set()
            t.join(5)
            assert set(seen) == {b"before"}  # never a stale or missing value
            write_seen_within_100ms(b"after-reshard")

            # the new owner (also the daemon's snapshot slot) fails over to its replica
            messages = apps[1].subscriber.stats.messages
            cl.failover(dst)
            write_seen_within_100ms(b"after-failover")
            # notifications continue: re-announcements keep the key hot past its TTL
            time.sleep(3.5)
            assert apps[1].subscriber.stats.messages > messages
            assert all(key.encode() in a.hotset for a in apps), (load.errors, daemon.stderr[-2000:])
            hits = apps[1].stats.hits
            for _ in range(200):
                assert apps[1].get(key) == b"after-failover"
            assert apps[1].stats.hits - hits >= 196  # still served locally
            assert daemon.proc is not None and daemon.proc.poll() is None
        finally:
            load.halt.set()
            load.join(5)
            for a in apps:
                a.close()
                a.client.close()
