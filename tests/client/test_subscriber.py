"""Subscriber against a real redis-server: bootstrap, live updates, gaps, restarts."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aredis

from hotkeyd.client import AsyncSubscriber, HotSet, Subscriber
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .helpers import FakeDaemon, wait_until

pytestmark = pytest.mark.integration


def test_late_start_knows_the_hot_set_from_the_snapshot(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"item:1", b"\xffbinary key")
    other = FakeDaemon(r, ns, instance="test-2")
    other.make_hot(b"item:2")
    with Subscriber(r, namespace=ns) as sub:
        # No message was published after start: everything came from the snapshots.
        assert sorted(sub.hotset.keys()) == [b"item:1", b"item:2", b"\xffbinary key"]
        assert sub.stats.messages == 0
        assert sub.hotset.last_seq("test-1") == daemon.seq


def test_stale_instances_are_ignored(r: redis.Redis, ns: Namespace, daemon: FakeDaemon) -> None:
    daemon.make_hot(b"k")
    r.zadd(ns.instances, {daemon.instance: 1.0})  # heartbeat from 1970
    with Subscriber(r, namespace=ns) as sub:
        assert sub.hotset.keys() == []


def test_live_hot_and_cool(r: redis.Redis, ns: Namespace, daemon: FakeDaemon) -> None:
    daemon.write_snapshot()
    with Subscriber(r, namespace=ns) as sub:
        daemon.make_hot(b"k1")
        assert wait_until(lambda: b"k1" in sub.hotset)
        daemon.make_cool(b"k1")
        assert wait_until(lambda: b"k1" not in sub.hotset)
        assert sub.stats.gaps == 0


def test_gap_triggers_resync_from_snapshot(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"a")
    with Subscriber(r, namespace=ns) as sub:
        daemon.make_hot(b"lost", publish=False)  # seq advances, message lost; snapshot has it
        daemon.make_hot(b"b")  # arrives with a gap
        assert wait_until(lambda: b"b" in sub.hotset)
        assert b"lost" in sub.hotset  # recovered from the snapshot
        assert sub.stats.gaps == 1
        assert sub.stats.gaps_unrecovered == 0
        assert sub.hotset.last_seq(daemon.instance) == daemon.seq


def test_buffered_messages_older_than_snapshot_are_skipped(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"a")
    with Subscriber(r, namespace=ns) as sub:
        before = sub.stats.stale
        r.publish(ns.channel, daemon.make_hot(b"x", publish=False).dumps())
        r.publish(ns.channel, daemon.make_hot(b"y", publish=False).dumps())
        # A replay of an old message (as if buffered before the snapshot): stale, no effect.
        daemon.hot.pop(b"x")
        old = daemon.make_cool(b"x", publish=False)
        r.publish(ns.channel, old.dumps())
        r.publish(ns.channel, old.dumps())
        assert wait_until(lambda: sub.stats.stale > before)
        assert b"x" not in sub.hotset and b"y" in sub.hotset


def test_bad_notification_is_counted_and_skipped(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.write_snapshot()
    with Subscriber(r, namespace=ns) as sub:
        r.publish(ns.channel, b"{not json")
        r.publish(ns.channel, b'{"v": 99}')
        daemon.make_hot(b"ok")
        assert wait_until(lambda: b"ok" in sub.hotset)
        assert sub.stats.bad_messages == 2


def test_redis_restart_reconnects_and_resyncs(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    daemon = FakeDaemon(r, ns)
    daemon.make_hot(b"before")
    sub = Subscriber(r, namespace=ns, backoff=(0.02, 0.2)).start()
    try:
        assert sub.wait_ready(5)
        assert b"before" in sub.hotset
        redis_server.restart(down_for=0.3)
        # Redis lost everything (no persistence); the daemon writes its snapshot again
        # (without publishing): only a resync after the reconnect can find "after".
        daemon.make_hot(b"after", publish=False)
        assert wait_until(lambda: sub.stats.reconnects >= 1, timeout=10)
        if b"after" not in sub.hotset:  # reconnected before the snapshot was rewritten
            daemon.make_hot(b"later")
            assert wait_until(lambda: b"later" in sub.hotset, timeout=5)
        assert wait_until(lambda: b"after" in sub.hotset, timeout=5)
        assert sub.connected
    finally:
        sub.stop()


def test_async_subscriber_bootstrap_live_and_gap(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    daemon = FakeDaemon(r, ns)
    daemon.make_hot(b"boot")

    async def main() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        try:
            async with AsyncSubscriber(client, namespace=ns) as sub:
                assert b"boot" in sub.hotset
                daemon.make_hot(b"live")
                for _ in range(200):
                    if b"live" in sub.hotset:
                        break
                    await asyncio.sleep(0.01)
                assert b"live" in sub.hotset
                daemon.make_hot(b"lost", publish=False)
                daemon.make_cool(b"boot")
                for _ in range(200):
                    if b"boot" not in sub.hotset:
                        break
                    await asyncio.sleep(0.01)
                assert b"boot" not in sub.hotset and b"lost" in sub.hotset
                assert sub.stats.gaps == 1
        finally:
            await client.aclose()

    asyncio.run(main())


def test_ttl_expiry_uses_the_clock_passed_in(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    clock = ManualClock(epoch=time.time())  # the daemon stamps real time; a ts far ahead is suspect
    cooled: list[bytes] = []
    hotset = HotSet(clock, on_cool=cooled.append)
    daemon.write_snapshot()
    with Subscriber(r, hotset, namespace=ns) as sub:
        assert sub.clock is clock
        daemon.make_hot(b"k", ttl_ms=1000)
        daemon.final()  # the daemon goes away: the entry stays until its TTL
        assert wait_until(lambda: sub.hotset.last_seq(daemon.instance) == daemon.seq)
        assert b"k" in hotset
        clock.advance(0.9)
        assert not wait_until(lambda: b"k" not in hotset, timeout=0.2)
        clock.advance(0.2)
        assert wait_until(lambda: cooled == [b"k"])


def test_reconnect_backs_off_while_redis_is_down(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    FakeDaemon(r, ns).write_snapshot()
    sub = Subscriber(r, namespace=ns, backoff=(0.05, 0.4)).start()
    try:
        assert sub.wait_ready(5)
        redis_server.stop()
        assert wait_until(lambda: not sub.connected, timeout=5)
        time.sleep(1.5)  # several failed attempts; the delay has grown to its cap
        assert sub.backoff.current == 0.4
        redis_server.start()
        assert wait_until(lambda: sub.connected and sub.stats.reconnects >= 1, timeout=10)
        assert sub.backoff.current == 0.05  # reset after success
    finally:
        sub.stop()


def test_async_subscriber_reconnects_after_restart(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    daemon = FakeDaemon(r, ns)
    daemon.make_hot(b"before")

    async def main() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        sub = AsyncSubscriber(client, namespace=ns, backoff=(0.02, 0.2))
        try:
            await sub.start()
            assert await sub.wait_ready(5)
            await asyncio.to_thread(redis_server.restart, 0.2)
            daemon.make_hot(b"after", publish=False)  # only a resync can find it
            for _ in range(1000):
                if sub.stats.reconnects >= 1 and b"after" in sub.hotset:
                    break
                if sub.stats.reconnects >= 1 and sub.connected and b"after" not in sub.hotset:
                    daemon.make_hot(b"after")  # reconnected before the snapshot came back
                await asyncio.sleep(0.01)
            assert sub.stats.reconnects >= 1 and b"after" in sub.hotset
        finally:
            await sub.stop()
            await client.aclose()

    asyncio.run(main())
