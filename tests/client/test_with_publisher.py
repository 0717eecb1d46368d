"""The client against the daemon's real RedisPublisher (snapshot format, full republish)."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.client import Subscriber
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Namespace
from hotkeyd.publish.redis import RedisPublisher
from hotkeyd.testing import RedisServer

from .helpers import wait_until

pytestmark = pytest.mark.integration


def entry(key: bytes, ttl_ms: int = 60_000) -> HotEntry:
    return HotEntry(key=key, rate=5000.0, rule="default", ttl_ms=ttl_ms)


def test_late_start_live_restart_and_final(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    pub = RedisPublisher(
        redis_server.url, ns, instance="real-1", heartbeat=0.2, backoff_base=0.02, backoff_cap=0.2
    )
    pub.start()
    sub = Subscriber(r, namespace=ns, backoff=(0.02, 0.2))
    try:
        pub.publish([entry(b"early")])
        assert wait_until(lambda: r.exists(ns.snapshot("real-1")) and pub.pending == 0)
        sub.start()
        assert sub.wait_ready(5)
        assert b"early" in sub.hotset  # from the publisher's snapshot
        pub.publish([entry(b"k2")], cool=[CoolEntry(b"early", "default")])
        assert wait_until(lambda: b"k2" in sub.hotset and b"early" not in sub.hotset)
        redis_server.restart(down_for=0.2)
        assert wait_until(lambda: sub.stats.reconnects >= 1 and sub.connected, timeout=10)
        pub.publish([entry(b"k3")])
        assert wait_until(lambda: b"k3" in sub.hotset, timeout=10)
        assert b"k2" in sub.hotset
        assert sub.stats.gaps_unrecovered == 0
        pub.close()  # final message; the entries stay until their TTL
        assert wait_until(lambda: not r.exists(ns.snapshot("real-1")))
        assert sorted(sub.hotset.keys()) == [b"k2", b"k3"]
    finally:
        pub.close()
        sub.stop()
