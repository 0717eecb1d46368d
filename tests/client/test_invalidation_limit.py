"""Forged invalidations against a real Redis: rate-limited per key, oversized ones
counted and dropped whole, never a flush (spec/vectors/watch.json has the exact rules)."""

from __future__ import annotations

import time

import redis

from hotkeyd.client import HotCache
from hotkeyd.protocol.limits import limit
from hotkeyd.protocol.wire import Namespace

from .helpers import FakeDaemon, get_calls, wait_until


def _forged(key: str) -> bytes:
    return b'{"v":1,"origin":"forger","keys":[{"key":"' + key.encode() + b'"}]}'


def test_a_forger_evicts_only_named_keys_no_faster_than_the_limit(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    r.set(b"victim", b"v")
    r.set(b"other", b"o")
    daemon.make_hot(b"victim", b"other")
    with HotCache(r, namespace=ns).start() as cache:
        assert wait_until(lambda: b"victim" in cache.hotset and b"other" in cache.hotset)
        cache.get(b"victim"), cache.get(b"other")
        before = get_calls(r)
        seconds, sent = 1.0, 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # a few thousand forged invalidations a second
            r.publish(ns.invalidate_channel, _forged("victim"))
            sent += 1
            assert cache.get(b"victim") == b"v"
            assert cache.get(b"other") == b"o"
        rereads = get_calls(r) - before
        per_s = 1000 / limit("invalidation_key_interval_ms")
        print(f"forger: {sent} invalidations in {seconds} s -> {rereads} re-reads")
        assert sent > 3 * per_s * seconds  # the forger was faster than the limit
        assert 1 <= rereads <= per_s * seconds * 1.3 + 5, (sent, rereads)
        assert cache.gate.intake.stats.deferred > 0


def test_an_oversized_invalidation_is_counted_and_flushes_nothing(
    r: redis.Redis, ns: Namespace, daemon: FakeDaemon
) -> None:
    r.set(b"k", b"v")
    daemon.make_hot(b"k")
    with HotCache(r, namespace=ns).start() as cache:
        assert wait_until(lambda: b"k" in cache.hotset)
        cache.get(b"k")
        before = get_calls(r)
        big = (
            b'{"v":1,"keys":[{"key":"k"}],"pad":"' + b"x" * limit("invalidation_bytes_max") + b'"}'
        )
        r.publish(ns.invalidate_channel, big)
        many = b",".join(b'{"key":"k%d"}' % i for i in range(limit("invalidation_keys_max") + 1))
        r.publish(ns.invalidate_channel, b'{"v":1,"keys":[' + many + b',{"key":"k"}]}')
        assert wait_until(lambda: cache.gate.intake.stats.oversized == 2)
        assert cache.get(b"k") == b"v"
        assert get_calls(r) == before  # still the local copy
        assert cache.bad_invalidations == 2
