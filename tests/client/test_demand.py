"""Demand reports from the client: counted on the read path, sent per daemon instance."""

from __future__ import annotations

import asyncio
import json
import time

import redis
import redis.asyncio as aredis
from prometheus_client import CollectorRegistry

from hotkeyd.client import AsyncHotCache, ClientMetrics, HotCache, HotSet, Subscriber
from hotkeyd.client.demand import AsyncDemandReporter, DemandCounter, DemandReporter
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.demand import DemandReport
from hotkeyd.protocol.wire import HotEntry, Message, Namespace
from hotkeyd.testing import RedisServer, free_port

from .helpers import FakeDaemon, get_calls, wait_until

NS = Namespace("t")


def hot(instance: str, seq: int, *keys: bytes, db: int = 0) -> Message:
    return Message(
        instance, seq, time.time(), hot=tuple(HotEntry(k, 1.0, "r", 60_000, db=db) for k in keys)
    )


def reports(counter: DemandCounter) -> dict[str, DemandReport]:
    return {ch: DemandReport.loads(p) for ch, p, _ in counter.take()}


def test_counter_routes_each_key_to_its_latest_announcer() -> None:
    hs = HotSet(ManualClock())
    hs.apply(hot("d1", 1, b"a", b"b"), force=True)
    hs.apply(hot("d2", 1, b"c", db=3), force=True)
    c = DemandCounter(hs, "app-1", NS, ManualClock())
    assert c.take() == []  # nothing served yet: nothing sent
    hs.items[b"a"].served += 5
    hs.items[(b"c", 3)].served += 2  # a key of db 3 is (key, db) in the hot set
    got = reports(c)
    assert set(got) == {"t:demand:d1", "t:demand:d2"}
    assert {(e.key, e.n, e.db) for e in got["t:demand:d1"].entries} == {(b"a", 5, 0)}
    assert {(e.key, e.n, e.db) for e in got["t:demand:d2"].entries} == {(b"c", 2, 3)}
    assert [r.seq for r in got.values()] == [1, 2]
    assert got["t:demand:d1"].app == "app-1" and got["t:demand:d1"].interval_ms == 250
    # only the increase is reported, and b now belongs to d2 (the most recent announcer)
    hs.apply(hot("d2", 2, b"b"))
    hs.items[b"a"].served += 1
    hs.items[b"b"].served += 4
    got = reports(c)
    assert {(e.key, e.n) for e in got["t:demand:d1"].entries} == {(b"a", 1)}
    assert {(e.key, e.n) for e in got["t:demand:d2"].entries} == {(b"b", 4)}


def test_a_key_that_turns_hot_again_starts_from_zero() -> None:
    clock = ManualClock()
    hs = HotSet(clock)
    hs.apply(Message("d1", 1, 0.0, hot=(HotEntry(b"a", 1.0, "r", 1000),)), force=True)
    c = DemandCounter(hs, "app", NS, clock)
    hs.items[b"a"].served = 10
    assert sum(n for _, _, n in c.take()) == 10
    clock.advance(2.0)
    hs.expire()
    hs.apply(Message("d1", 2, 0.0, hot=(HotEntry(b"a", 1.0, "r", 1000),)))
    hs.items[b"a"].served = 3
    assert sum(n for _, _, n in c.take()) == 3


def test_a_forked_child_reports_only_its_own_reads_as_another_app() -> None:
    hs = HotSet(ManualClock())
    hs.apply(hot("d1", 1, b"a"), force=True)
    c = DemandCounter(hs, "parent", NS, ManualClock())
    hs.items[b"a"].served += 5
    assert c.take() and c.next_seq == 2
    hs.items[b"a"].served += 7  # served by the parent, not yet reported when it forks
    c.rebase("child")
    assert c.take() == []  # the parent reports those 7, not the child
    hs.items[b"a"].served += 2
    (got,) = reports(c).values()
    assert (got.app, got.seq, [e.n for e in got.entries]) == ("child", 1, [2])


def test_reports_are_bounded_heaviest_kept() -> None:
    hs = HotSet(ManualClock())
    hs.apply(hot("d1", 1, *[f"k{i}".encode() for i in range(1500)]), force=True)
    for i in range(1500):
        hs.items[f"k{i}".encode()].served = i + 1
    c = DemandCounter(hs, "app", NS, ManualClock())
    (rep,) = reports(c).values()
    assert len(rep.entries) == 1000
    assert min(e.n for e in rep.entries) == 501  # the 1,000 heaviest
    assert c.stats.dropped == sum(range(1, 501))  # reads of the 500 left out
    # long keys: the byte bound halves the entries until it fits
    hs2 = HotSet(ManualClock())
    hs2.apply(hot("d1", 1, *[bytes([65 + i]) * 3000 for i in range(20)]), force=True)
    for i, item in enumerate(hs2.items.values()):
        item.served = i + 1
    c2 = DemandCounter(hs2, "app", NS, ManualClock(), max_bytes=20_000)
    ((_, payload, _),) = c2.take()
    assert len(payload) <= 20_000 and c2.stats.dropped == sum(range(1, 16))


def test_failed_sends_are_counted_not_raised(redis_server: RedisServer) -> None:
    hs = HotSet(ManualClock())
    hs.apply(hot("d1", 1, b"a"), force=True)
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.2)
    rep = DemandReporter(DemandCounter(hs, "app", NS, ManualClock()), dead.publish)
    hs.items[b"a"].served += 7
    assert rep.flush() == 0
    assert (rep.stats.failed, rep.stats.lost, rep.stats.reports) == (1, 7, 0)
    hs.items[b"a"].served += 1  # the next report carries only new reads (no retry)
    live = redis.Redis.from_url(redis_server.url)
    rep2 = DemandReporter(rep.counter, live.publish)
    assert rep2.flush() == 1
    assert (rep.stats.reports, rep.stats.accesses) == (1, 1)


def test_async_reporter_stops_when_a_publish_swallows_the_cancel() -> None:
    """A cancel landing inside a PUBLISH can come out as a TimeoutError (the client's read
    timeout racing it) and be lost: ``stop()`` still returns, with the report counted.
    Before, the task went on reporting and an async app's ``close()`` never returned."""
    hs = HotSet(ManualClock())
    hs.apply(hot("d1", 1, b"a"), force=True)

    async def main() -> AsyncDemandReporter:
        entered = asyncio.Event()

        async def publish(channel: str, payload: bytes) -> int:
            if entered.is_set():
                return 1  # the last report, sent by stop()
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                raise TimeoutError("Timeout reading from socket") from None
            return 1

        rep = AsyncDemandReporter(DemandCounter(hs, "app", NS, ManualClock()), publish)
        rep.start()
        hs.items[b"a"].served += 3
        await asyncio.wait_for(entered.wait(), 5)  # the task is inside the PUBLISH
        hs.items[b"a"].served += 2
        t0 = time.monotonic()
        await asyncio.wait_for(rep.stop(), 5)
        took = time.monotonic() - t0
        assert took < 2.0, f"stop() took {took:.1f} s"  # it never returned, before
        return rep

    rep = asyncio.run(main())
    assert rep.stats.failed == 1 and rep.stats.lost == 3  # the swallowed send, counted
    assert (rep.stats.reports, rep.stats.accesses) == (1, 2)  # stop()'s last report


def _listen(r: redis.Redis, channel: str) -> redis.client.PubSub:
    ps = r.pubsub(ignore_subscribe_messages=True)
    ps.subscribe(channel)
    assert wait_until(lambda: r.pubsub_numsub(channel)[0][1] == 1)
    return ps


def _drain(ps: redis.client.PubSub, timeout: float = 2.0) -> list[DemandReport]:
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = ps.get_message(timeout=0.1)
        if m is not None and m["type"] == "message":
            out.append(DemandReport.loads(m["data"]))
        elif m is None and out:
            break
    return out


def test_hotcache_reports_exactly_the_reads_it_served_locally(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon, redis_server: RedisServer
) -> None:
    r.set("item:1", b"v")
    r.set("item:2", b"w")
    ps = _listen(r, ns.demand_channel(daemon.instance))
    registry = CollectorRegistry()
    cache = HotCache.from_url(
        redis_server.url, namespace=ns, report_interval=0.5, metrics=ClientMetrics(registry)
    )
    try:
        daemon.make_hot(b"item:1", b"item:2")
        assert wait_until(lambda: b"item:1" in cache.hotset and b"item:2" in cache.hotset)
        cache.flush_demand()
        before = get_calls(r)
        for _ in range(300):
            assert cache.get("item:1") == b"v"
        assert cache.mget(["item:1", "item:2", "cold"]) == [b"v", b"w", None]
        assert cache.cached("item:2", lambda: "db-row") == "db-row"
        assert cache.cached("item:2", lambda: "other") == "db-row"
        redis_reads = get_calls(r) - before + get_calls(r, "mget")
        cache.flush_demand()
        got = _drain(ps)
        served = {e.key: 0 for rep in got for e in rep.entries}
        for rep in got:
            for e in rep.entries:
                served[e.key] += e.n
        # 300 GETs + 1 MGET hit of item:1, minus the one GET that loaded it from Redis;
        # item:2: the MGET read it from Redis, the second cached() call was local
        assert served == {b"item:1": 300, b"item:2": 1}
        assert get_calls(r) - before == 1 and redis_reads >= 1
        assert cache.demand_stats is not None and cache.demand_stats.accesses == 301
        assert registry.get_sample_value("hotkeyd_client_demand_accesses_total") == 301
        assert registry.get_sample_value("hotkeyd_client_demand_report_failures_total") == 0
    finally:
        cache.close()
        ps.close()


def test_background_thread_reports_and_shared_hotset_reports_once(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon, redis_server: RedisServer
) -> None:
    r.set("item:1", b"v")
    ps = _listen(r, ns.demand_channel(daemon.instance))
    sub = Subscriber(redis.Redis.from_url(redis_server.url), namespace=ns)
    a = HotCache(redis.Redis.from_url(redis_server.url), sub, namespace=ns)
    b = HotCache(redis.Redis.from_url(redis_server.url), sub, namespace=ns)
    try:
        a.start()
        b.start()
        assert a.demand_stats is not None and b.demand_stats is None  # a owns the set
        daemon.make_hot(b"item:1")
        assert wait_until(lambda: b"item:1" in a.hotset)
        for _ in range(100):
            a.get("item:1")
            b.get("item:1")
        assert wait_until(lambda: a.demand_stats.accesses >= 198, timeout=3)  # type: ignore[union-attr]
        got = _drain(ps, 1.0)
        assert sum(e.n for rep in got for e in rep.entries) == 198  # 2 loads from Redis
    finally:
        a.close()
        b.close()
        sub.stop()
        ps.close()


def test_report_demand_off_sends_nothing(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon, redis_server: RedisServer
) -> None:
    r.set("item:1", b"v")
    cache = HotCache.from_url(redis_server.url, namespace=ns, report_demand=False)
    try:
        daemon.make_hot(b"item:1")
        assert wait_until(lambda: b"item:1" in cache.hotset)
        for _ in range(10):
            cache.get("item:1")
        assert cache.flush_demand() == 0 and cache.demand_stats is None
        assert r.pubsub_numsub(ns.demand_channel(daemon.instance))[0][1] == 0
    finally:
        cache.close()


def test_async_hotcache_reports(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon, redis_server: RedisServer
) -> None:
    r.set("item:1", b"v")
    ps = _listen(r, ns.demand_channel(daemon.instance))

    async def main() -> int:
        client = aredis.Redis.from_url(redis_server.url)
        cache = await AsyncHotCache(client, namespace=ns).start()
        try:
            daemon.make_hot(b"item:1")
            for _ in range(200):
                if b"item:1" in cache.hotset:
                    break
                await asyncio.sleep(0.01)
            for _ in range(50):
                assert await cache.get("item:1") == b"v"
            assert await cache.cached("item:1", _loader) == "x"
            assert await cache.cached("item:1", _loader) == "x"
            await asyncio.sleep(0.4)  # the task reports on its own
            assert cache.demand_stats is not None
            return cache.demand_stats.accesses
        finally:
            await cache.close()
            await client.aclose()

    async def _loader() -> str:
        return "x"

    assert asyncio.run(main()) == 50
    got = _drain(ps)
    assert sum(e.n for rep in got for e in rep.entries) == 50
    assert json.loads(got[0].dumps())["type"] == "demand"
