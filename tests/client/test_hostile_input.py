"""Hostile input on the events channel (issue 14): whatever anyone allowed to PUBLISH
sends, the subscriber never reconnects or flushes its caches, bounds what it keeps, and
does not let a forged seq or ts mute a real daemon. Real Redis, real subscriber."""

from __future__ import annotations

import json
import time

import pytest
import redis

from hotkeyd.client import HotCache, Subscriber
from hotkeyd.client.hotset import ApplyResult, HotSet
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import Message, Namespace

from .helpers import FakeDaemon, wait_until

pytestmark = pytest.mark.integration


def _entry(key: str, **kw: object) -> dict[str, object]:
    return {"key": key, "rate": 10.0, "rule": "r", "ttl_ms": 5000, **kw}


def _msg(instance: str, seq: int, hot: list[object], **kw: object) -> bytes:
    doc = {"v": 1, "instance": instance, "seq": seq, "ts": time.time(), "hot": hot, "cool": []}
    doc.update(kw)
    return json.dumps(doc).encode()


POISON = [
    _msg("poison", 1, [1]),  # "hot": [1]
    _msg("poison", 2, [_entry("k", ttl_ms=1e400)]),  # "ttl_ms": Infinity
    _msg("poison", 3, [_entry("k")]).replace(b'"seq": 3', b'"seq": Infinity'),
    b"[" * 100_000 + b"]" * 100_000,  # RecursionError in json
    b'{"v":1,"instance":"x","seq":' + b"9" * 5000 + b',"ts":1}',  # > 4300 digits
    b'{"v":1,"instance":"x","seq":1,"ts":1,"hot":{"a":1}}',
    b'{"v":1,"instance":["x"],"seq":1,"ts":1}',
    b'{"v":1,"instance":"x","seq":true,"ts":1}',
    b"\xff\xfe not utf-8",
    b"null",
    # a 400-digit ts (issue 23: an OverflowError restarted the subscription each time)
    b'{"v":1,"instance":"x","seq":1,"ts":' + b"1" * 400 + b',"hot":[]}',
    _msg("poison", 4, [_entry("k", rate=int("9" * 400))]),  # a 400-digit rate
]


def test_poison_never_reconnects_or_flushes(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"real")
    with Subscriber(r, namespace=ns) as sub:
        assert wait_until(lambda: b"real" in sub.hotset)
        for payload in POISON:
            r.publish(ns.channel, payload)
        r.publish(ns.channel, b"x" * (5 << 20))  # larger than max_message_bytes (4 MiB)
        daemon.make_hot(b"after")
        assert wait_until(lambda: b"after" in sub.hotset)
        assert sub.stats.reconnects == 0
        assert b"real" in sub.hotset  # nothing was flushed
        # [1] is a bad *entry* (the message itself is fine); a non-finite or out-of-range
        # number anywhere rejects the whole message (spec/vectors/hostile.json)
        assert sub.stats.bad_entries == 1
        assert sub.stats.bad_messages == len(POISON) - 1 + 1


def test_huge_ttl_is_capped_on_the_client(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"pinned", ttl_ms=3_600_000)  # an hour: within the wire cap of a day
    with Subscriber(r, namespace=ns) as sub:
        assert wait_until(lambda: b"pinned" in sub.hotset)
        entry = sub.hotset.get(b"pinned")
        assert entry is not None and entry.ttl_ms == 60_000  # HotSet max_ttl
        assert sub.hotset.items[b"pinned"].expires <= sub.clock.monotonic() + 60.0
        r.publish(ns.channel, _msg("test-1", daemon.seq + 1, [_entry("k", ttl_ms=10**15)]))
        assert wait_until(lambda: sub.stats.bad_entries == 1)  # above the wire's day: bad


def test_forged_seq_or_ts_does_not_mute_a_real_daemon(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"a")
    with Subscriber(r, namespace=ns) as sub:
        assert wait_until(lambda: b"a" in sub.hotset)
        r.publish(ns.channel, _msg(daemon.instance, 2**52, [_entry("forged")]))
        r.publish(ns.channel, _msg(daemon.instance, 2**52, [_entry("forged")], full=True))
        r.publish(ns.channel, _msg(daemon.instance, daemon.seq + 1, [], ts=1e18))
        assert wait_until(lambda: sub.stats.suspect == 3)
        daemon.make_hot(b"b")  # the real daemon's next message is still applied
        assert wait_until(lambda: b"b" in sub.hotset)
        assert b"forged" not in sub.hotset
        assert sub.hotset.last_seq(daemon.instance) == daemon.seq
        assert sub.stats.reconnects == 0


def test_forged_keys_cannot_crowd_out_a_real_key() -> None:
    clock = ManualClock()
    hs = HotSet(clock, max_keys=1000, max_keys_per_instance=100)
    from hotkeyd.protocol.wire import HotEntry

    def hot(inst: str, seq: int, keys: list[bytes]) -> Message:
        entries = tuple(HotEntry(k, 1.0, "r", 5000) for k in keys)
        return Message(instance=inst, seq=seq, ts=clock.time(), hot=entries, full=True)

    assert hs.apply(hot("forger", 1, [b"f%d" % i for i in range(100_000)])) is ApplyResult.APPLIED
    assert len(hs) == 100 and hs.dropped == 99_900
    assert hs.apply(hot("real", 1, [b"real"])) is ApplyResult.APPLIED
    assert b"real" in hs


def test_instance_cap_holds_in_linear_time() -> None:
    clock = ManualClock()
    hs = HotSet(clock, max_instances=100)
    from hotkeyd.protocol.wire import HotEntry

    t0 = time.perf_counter()
    for i in range(20_000):
        m = Message(
            instance=f"f{i}", seq=1, ts=0.0, hot=(HotEntry(b"k", 1.0, "r", 5000),), full=True
        )
        hs.apply(m)
    took = time.perf_counter() - t0
    assert len(hs.instances()) == 100
    assert hs.refused == 19_900
    assert took < 10.0  # quadratic (a scan per message) took minutes; linear is ~0.1 s


def test_bad_snapshot_never_breaks_from_url(
    r: redis.Redis, redis_server: object, ns: Namespace, daemon: FakeDaemon
) -> None:
    daemon.make_hot(b"good")
    r.set(ns.snapshot("broken"), b'{"v":1,"instance":"broken","seq":"x","ts":1,"hot":[]}')
    r.set(ns.snapshot("inf"), _msg("inf", 1, [_entry("k", ttl_ms=1e400)], full=True))
    # a 400-digit ts (issue 23: every new from_url() failed after 10 s)
    huge = b'{"v":1,"instance":"huge","seq":1,"ts":' + b"1" * 400 + b',"full":true,"hot":[]}'
    r.set(ns.snapshot("huge"), huge)
    r.zadd(ns.instances, {"broken": time.time(), "inf": time.time(), "huge": time.time()})
    cache = HotCache.from_url(redis_server.url, namespace=ns, report_demand=False)  # type: ignore[attr-defined]
    try:
        assert b"good" in cache.hotset
        # each skipped and counted: a non-finite number rejects the whole snapshot
        assert cache.subscriber.stats.bad_snapshots == 3
        assert "inf" not in cache.hotset.instances()
        assert "huge" not in cache.hotset.instances()
        assert b"k" not in cache.hotset
    finally:
        cache.close()
