"""Strict and available mode against a real daemon (hotkeyd run, stdin source) and Redis.

Strict: a copy is served only while the watch of its node heartbeats; a stopped daemon
(SIGSTOP: no heartbeat, no invalidation) stops local serving within the 300 ms lease,
and it resumes once the heartbeats are back. A killed watch connection (new epoch)
drops every copy. Available: copies are served through the same pause, and the lapse is
counted in ``watch_stats``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.client.watchguard import LEASE_S
from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess
from tests.client.helpers import wait_until
from tests.watch.test_watch import _armed, _Load

pytestmark = pytest.mark.integration

KEY = b"item:strict"


@pytest.fixture
def daemon(redis_server: RedisServer) -> Iterator[DaemonProcess]:
    with DaemonProcess("--redis-url", redis_server.url, "--window", "0.5") as d:
        yield d


def _served_locally(cache: HotCache, timeout: float = 5.0) -> bool:
    """Reads of KEY are answered from the local copy (the served counter moves)."""

    def moved() -> bool:
        item = cache.hotset.items.get(KEY)
        before = item.served if item else 0
        cache.get(KEY)
        cache.get(KEY)
        item = cache.hotset.items.get(KEY)
        return item is not None and item.served >= before + 1

    return wait_until(moved, timeout=timeout)


def test_strict_stops_serving_within_the_lease_and_resumes(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    redis.Redis.from_url(redis_server.url).set(KEY, b"v")
    cache = HotCache.from_url(redis_server.url, consistency="strict")
    try:
        with _Load(daemon, {KEY: 3000.0}):
            _armed(daemon, 1)
            assert _served_locally(cache), cache.watch_stats
            assert daemon.proc is not None
            os.kill(daemon.proc.pid, signal.SIGSTOP)
            try:
                t0 = time.perf_counter()
                misses = cache.watch_stats.strict_misses
                while cache.watch_stats.strict_misses == misses:
                    cache.get(KEY)
                    time.sleep(0.001)
                    assert time.perf_counter() - t0 < 3, "still served locally 3 s after SIGSTOP"
                stopped = time.perf_counter() - t0
                # and from then on nothing is served locally
                item = cache.hotset.items[KEY]
                served = item.served
                for _ in range(20):
                    assert cache.get(KEY) == b"v"
                assert item.served == served
            finally:
                os.kill(daemon.proc.pid, signal.SIGCONT)
            t1 = time.perf_counter()
            assert _served_locally(cache), cache.watch_stats
            resumed = time.perf_counter() - t1
        print(f"strict: local serving stopped {stopped * 1000:.0f} ms after SIGSTOP "
              f"(lease {LEASE_S * 1000:.0f} ms), resumed {resumed * 1000:.0f} ms after SIGCONT")  # fmt: skip
        assert stopped <= LEASE_S + 0.1, stopped  # the lease, plus this loop's own lag
    finally:
        cache.close()


def test_strict_a_killed_watch_connection_drops_copies_then_serves_again(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    data = redis.Redis.from_url(redis_server.url)
    data.set(KEY, b"v")
    cache = HotCache.from_url(redis_server.url, consistency="strict")
    try:
        with _Load(daemon, {KEY: 3000.0}):
            _armed(daemon, 1)
            assert _served_locally(cache)
            before = daemon.metric("hotkeyd_watch_reconnects_total")
            data.execute_command(
                "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", "USER", "default"
            )
            assert wait_until(lambda: cache.watch_stats.epoch_changes >= 1, timeout=5), (
                cache.watch_stats
            )
            assert daemon.metric("hotkeyd_watch_reconnects_total") > before
            data = redis.Redis.from_url(redis_server.url)
            data.set(KEY, b"v2")  # a write after the re-arm is seen
            assert wait_until(lambda: cache.get(KEY) == b"v2", timeout=2)
            assert _served_locally(cache)
    finally:
        cache.close()


def test_available_serves_through_the_pause_and_counts_the_lapse(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    redis.Redis.from_url(redis_server.url).set(KEY, b"v")
    cache = HotCache.from_url(redis_server.url)  # consistency="available", the default
    assert cache.consistency == "available"
    try:
        with _Load(daemon, {KEY: 3000.0}):
            _armed(daemon, 1)
            assert _served_locally(cache)
            lapsed = cache.watch_stats.lapsed
            assert daemon.proc is not None
            os.kill(daemon.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(LEASE_S + 0.2)
                item = cache.hotset.items[KEY]
                served = item.served
                for _ in range(20):
                    assert cache.get(KEY) == b"v"
                assert item.served == served + 20  # all local: until the TTL
                assert cache.watch_stats.lapsed >= lapsed + 20
                assert cache.watch_stats.strict_misses == 0
            finally:
                os.kill(daemon.proc.pid, signal.SIGCONT)
    finally:
        cache.close()


@pytest.mark.parametrize("flavor", ["valkey", "valkey9"])
def test_valkey_watch_direct_write_and_strict_lease(flavor: str) -> None:
    """The watch on Valkey (CLIENT TRACKING OPTIN is the same there): a direct SET drops a
    strict HotCache's copy, and a stopped daemon stops local serving within the lease."""
    from tests.conftest import _missing

    try:
        server = RedisServer(flavor=flavor)
    except FileNotFoundError as exc:
        _missing(str(exc))
    with server, DaemonProcess("--redis-url", server.url, "--window", "0.5") as daemon:
        data = redis.Redis.from_url(server.url)
        data.set(KEY, b"v")
        cache = HotCache.from_url(server.url, consistency="strict")
        try:
            with _Load(daemon, {KEY: 3000.0}):
                _armed(daemon, 1)
                assert _served_locally(cache), cache.watch_stats
                t0 = time.perf_counter()
                data.set(KEY, b"w")  # not through the SDK
                while cache.get(KEY) != b"w":
                    assert time.perf_counter() - t0 < 2, "the direct SET was not seen"
                    time.sleep(0.0005)
                seen = time.perf_counter() - t0
                assert _served_locally(cache)
                assert daemon.proc is not None
                os.kill(daemon.proc.pid, signal.SIGSTOP)
                try:
                    t1 = time.perf_counter()
                    misses = cache.watch_stats.strict_misses
                    while cache.watch_stats.strict_misses == misses:
                        cache.get(KEY)
                        time.sleep(0.001)
                        assert time.perf_counter() - t1 < 3
                    stopped = time.perf_counter() - t1
                finally:
                    os.kill(daemon.proc.pid, signal.SIGCONT)
                assert _served_locally(cache)
            print(f"{flavor}: direct SET seen after {seen * 1000:.1f} ms; strict stopped "
                  f"{stopped * 1000:.0f} ms after SIGSTOP")  # fmt: skip
            assert seen < 0.5 and stopped <= LEASE_S + 0.1
        finally:
            cache.close()
