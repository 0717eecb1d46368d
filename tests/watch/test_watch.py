"""Writes from anywhere reach every app: the daemon's watch (hotkeyd.watch), real servers.

A daemon reads keys on stdin (no MONITOR) and watches the hot keys on the data Redis;
a HotCache serves a hot key locally; a writer that is not the SDK changes the key; the
app must drop its copy within milliseconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import jsonschema
import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess
from tests.client.helpers import wait_until

pytestmark = pytest.mark.integration

SPEC = Path(__file__).resolve().parents[2] / "spec"
BOUND = 0.5  # seconds: generous on a loaded 2-core machine; typical is a few ms


class _Load:
    """Keeps ``keys`` hot: feeds them into the daemon's stdin from a thread."""

    def __init__(self, d: DaemonProcess, keys: dict[bytes, float]) -> None:
        self.d, self.keys = d, keys
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.d.feed_rate(self.keys, seconds=0.2)
            except (BrokenPipeError, ValueError, OSError):
                return

    def __enter__(self) -> _Load:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)


def _dropped_within(cache: HotCache, key: bytes, write: Callable[[], object]) -> float:
    """Cache ``key`` locally, run ``write``, return seconds until the copy is gone."""
    assert wait_until(lambda: key in cache.hotset, timeout=10)
    # the previous write's invalidations are through (a re-arm sooner than REARM_SPACING
    # after the last one is broadcast twice: the second would cut this measurement short)
    time.sleep(0.07)
    cache.get(key)
    assert wait_until(lambda: key in cache.local, timeout=2), "no local copy"
    t0 = time.perf_counter()
    write()
    while key in cache.local:
        if time.perf_counter() - t0 > 5:
            raise AssertionError(f"copy of {key!r} still served 5 s after the write")
        time.sleep(0.0002)
    return time.perf_counter() - t0


def _armed(d: DaemonProcess, n: int) -> None:
    """Wait until the daemon's watch armed ``n`` keys (arming follows the announcement by
    a few ms; an app may copy a key before: the strict mode of issue 25 closes that gap)."""
    assert wait_until(lambda: d.metric("hotkeyd_watch_keys") >= n, timeout=10), d.stderr


@pytest.fixture
def daemon(redis_server: RedisServer) -> Iterator[DaemonProcess]:
    with DaemonProcess("--redis-url", redis_server.url, "--window", "0.5") as d:
        yield d


def test_writes_from_anywhere_drop_the_copy(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    data = redis.Redis.from_url(redis_server.url)  # not the SDK
    key = b"item:1"
    data.set(key, b"v0")
    cache = HotCache.from_url(redis_server.url)
    lat: dict[str, list[float]] = {"set": [], "lua": [], "expire": [], "kill": []}
    try:
        with _Load(daemon, {key: 3000.0}):
            _armed(daemon, 1)
            for i in range(50):
                lat["set"].append(_dropped_within(cache, key, partial(data.set, key, b"s%d" % i)))
            for i in range(5):
                lat["lua"].append(
                    _dropped_within(
                        cache,
                        key,
                        partial(data.eval, "redis.call('SET', KEYS[1], ARGV[1])", 1, key, i),
                    )
                )
            # expiry: Redis pushes the invalidation when its expiry cycle deletes the key
            set_at = time.perf_counter()
            data.set(key, b"e", px=300)
            _dropped_within(cache, key, lambda: None)
            after = time.perf_counter() - set_at
            assert after >= 0.3, "dropped before the key expired: not the expiry"
            lat["expire"].append(after - 0.3)
            data.set(key, b"v")
            # the watch connection killed: re-armed, and later writes still invalidate
            before = daemon.metric("hotkeyd_watch_reconnects_total")
            data.execute_command(
                "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", "USER", "default"
            )
            assert wait_until(
                lambda: daemon.metric("hotkeyd_watch_reconnects_total") > before, timeout=5
            ), daemon.stderr
            data = redis.Redis.from_url(redis_server.url)
            for i in range(5):
                lat["kill"].append(_dropped_within(cache, key, partial(data.set, key, b"k%d" % i)))
        assert daemon.metric("hotkeyd_watch_invalidations_total") >= 60
        assert daemon.metric("hotkeyd_watch_armed_total") >= 60
        sets = sorted(lat["set"])
        print(f"direct SET -> copy dropped, {len(sets)} writes: p50 {sets[len(sets) // 2] * 1000:.2f} ms, "
              f"p99 {sets[int(len(sets) * 0.99)] * 1000:.2f} ms")  # fmt: skip
        worst = {k: max(v) for k, v in lat.items()}
        print("watch invalidation latency, worst per writer (ms):",
              {k: round(v * 1000, 2) for k, v in worst.items()})  # fmt: skip
        assert all(v < BOUND for v in worst.values()), worst
    finally:
        cache.close()


def test_on_the_bus_node_the_invalidation_follows_its_re_arm_on_one_connection(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    # The data Redis is the bus (no --watch-url): the watch pipelines the key's re-arm
    # (CLIENT CACHING yes + EXISTS) and the PUBLISH on its tracking connection, one round
    # trip; Redis runs them in order, so the re-arm precedes every re-read the
    # invalidation causes. MONITOR shows which connection sent what, in order.
    data = redis.Redis.from_url(redis_server.url)
    key = b"item:copub"
    data.set(key, b"v0")
    seen: list[dict[str, object]] = []
    with _Load(daemon, {key: 3000.0}):
        _armed(daemon, 1)
        time.sleep(0.2)
        mon = redis.Redis.from_url(redis_server.url).monitor()
        with mon as m:
            stop = time.monotonic() + 3.0

            def read() -> None:
                while time.monotonic() < stop:
                    seen.append(m.next_command())

            t = threading.Thread(target=read, daemon=True)
            t.start()
            for i in range(5):
                time.sleep(0.15)  # > REARM_SPACING: each write re-armed at once
                data.set(key, b"w%d" % i)
            t.join(5)
    by_port: dict[object, list[str]] = {}
    for c in seen:
        by_port.setdefault(c["client_port"], []).append(str(c["command"]))
    copub = 0
    for cmds in by_port.values():
        for i, cmd in enumerate(cmds):
            if cmd.startswith("PUBLISH") and ":invalidate" in cmd and "copub" in cmd:
                assert i >= 2 and cmds[i - 1] == "EXISTS item:copub", cmds[max(0, i - 3) : i + 1]
                assert cmds[i - 2] == "CLIENT CACHING YES", cmds[max(0, i - 3) : i + 1]
                copub += 1
    assert copub >= 5, by_port


def test_on_one_node_many_keys_are_armed_with_one_exists(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    # CLIENT CACHING yes arms every key the next command reads: one EXISTS of many keys
    # arms them all with two commands (a cluster node sends one EXISTS per slot).
    data = redis.Redis.from_url(redis_server.url)
    keys = [b"item:many%02d" % i for i in range(12)]
    for k in keys:
        data.set(k, b"v0")
    mon = redis.Redis.from_url(redis_server.url).monitor()
    seen: list[str] = []
    with mon as m:
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                seen.append(str(m.next_command()["command"]))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        with _Load(daemon, dict.fromkeys(keys, 3000.0)):
            _armed(daemon, len(keys))
            cache = HotCache.from_url(redis_server.url)
            try:
                for k in keys[:3]:  # and each of them is watched
                    assert _dropped_within(cache, k, partial(data.set, k, b"w")) < BOUND
            finally:
                cache.close()
        stop.set()
        data.ping()  # one more command for the reader to return with
        t.join(5)
    exists = [c.split()[1:] for c in seen if c.startswith("EXISTS item:many")]
    assert max(len(e) for e in exists) > 1, exists  # several keys in one EXISTS
    assert {k.decode() for k in keys} <= {k for e in exists for k in e}, exists


def test_eviction_under_maxmemory_drops_the_copy() -> None:
    with RedisServer(
        extra_args=["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random"]
    ) as rs:
        data = redis.Redis.from_url(rs.url)
        key = b"item:evict"
        data.set(key, b"v0")
        with DaemonProcess("--redis-url", rs.url, "--window", "0.5") as d, _Load(d, {key: 3000.0}):
            cache = HotCache.from_url(rs.url)
            _armed(d, 1)
            try:
                filler = 0

                def fill() -> None:  # until our key is evicted
                    nonlocal filler
                    while data.exists(key):
                        pipe = data.pipeline(transaction=False)
                        for _ in range(200):
                            filler += 1
                            pipe.set(b"fill:%d" % filler, b"x" * 1000)
                        pipe.execute()

                took = _dropped_within(cache, key, fill)
                assert took < 5
            finally:
                cache.close()
            assert d.metric("hotkeyd_watch_invalidations_total", cause="write") >= 1


def test_flush_invalidates_every_hot_key_and_heartbeats_flow(
    redis_server: RedisServer, daemon: DaemonProcess
) -> None:
    data = redis.Redis.from_url(redis_server.url)
    keys = [b"a:1", b"a:2"]
    for k in keys:
        data.set(k, b"v")
    sub = data.pubsub()
    sub.subscribe("hotkeyd:watch")
    cache = HotCache.from_url(redis_server.url)
    try:
        with _Load(daemon, dict.fromkeys(keys, 3000.0)):
            assert wait_until(lambda: all(k in cache.hotset for k in keys), timeout=10)
            _armed(daemon, 2)
            for k in keys:
                cache.get(k)
            assert wait_until(lambda: all(k in cache.local for k in keys), timeout=2)
            data.flushall()
            assert wait_until(lambda: not any(k in cache.local for k in keys), timeout=BOUND)
            beats = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.0:
                m = sub.get_message(timeout=0.2)
                if m and m["type"] == "message":
                    beats.append(json.loads(m["data"]))
            assert 5 <= len(beats) <= 15, beats  # every 100 ms
            assert beats[-1]["up"] is True and beats[-1]["epoch"] >= 1
            schema = json.loads((SPEC / "schema" / "watch-heartbeat-v1.json").read_text())
            for b in beats:
                jsonschema.validate(b, schema)
        assert daemon.metric("hotkeyd_watch_invalidations_total", cause="flush") >= 2
        assert daemon.health() == "ok"
    finally:
        sub.close()
        cache.close()


def test_signed_invalidations_with_auth(redis_server: RedisServer, tmp_path: Path) -> None:
    """With --auth-key-file the watch signs its invalidations and heartbeats (a trailing
    ``sig``, as every daemon message); a HotCache with the key verifies both (strict mode
    serves locally only on verified heartbeats) and drops an unsigned invalidation."""
    from hotkeyd.protocol.auth import MessageAuth

    secret = b"watch-test-key-0123456789"
    keyfile = tmp_path / "auth.key"
    keyfile.write_bytes(secret + b"\n")
    auth = MessageAuth([secret])
    data = redis.Redis.from_url(redis_server.url)
    key = b"item:signed"
    data.set(key, b"v0")
    sub = data.pubsub()
    sub.subscribe("hotkeyd:invalidate", "hotkeyd:watch")
    with DaemonProcess(
        "--redis-url", redis_server.url, "--auth-key-file", str(keyfile), "--window", "0.5"
    ) as d, _Load(d, {key: 3000.0}):  # fmt: skip
        cache = HotCache.from_url(redis_server.url, auth=auth, consistency="strict")
        _armed(d, 1)
        try:
            took = _dropped_within(cache, key, partial(data.set, key, b"v1"))
            assert took < BOUND
            assert wait_until(lambda: cache.get(key) == b"v1" and key in cache.local, timeout=2)
            assert cache.watch_stats.heartbeats > 0 and cache.watch_stats.bad_heartbeats == 0
            forged = b'{"v":1,"origin":"forger","keys":[{"key":"item:signed"}]}'
            data.publish("hotkeyd:invalidate", forged)
            assert wait_until(lambda: cache.gate.intake.stats.unsigned == 1, timeout=2)
            assert key in cache.local  # the forged (unsigned) one dropped nothing
        finally:
            cache.close()
    seen: set[bytes] = set()
    while (m := sub.get_message(timeout=0.1)) is not None:
        if m["type"] == "message" and b'"forger"' not in m["data"]:
            assert auth.verify(m["data"]) is not None, m  # signed with the daemon's key
            seen.add(m["channel"])
    sub.close()
    assert seen == {b"hotkeyd:invalidate", b"hotkeyd:watch"}


def test_a_tracking_table_smaller_than_the_hot_set_does_not_storm() -> None:
    """tracking-table-max-keys 1 and two hot keys: every re-arm evicts the other key,
    which Redis reports as an invalidation. The re-arms are spaced (REARM_SPACING), so
    the broadcasts stay tens per second, not thousands, and writes still drop copies."""
    from hotkeyd.watch import REARM_SPACING

    with RedisServer(extra_args=["--tracking-table-max-keys", "1"]) as rs:
        data = redis.Redis.from_url(rs.url)
        keys = [b"t:1", b"t:2"]
        for k in keys:
            data.set(k, b"v0")
        with DaemonProcess("--redis-url", rs.url, "--window", "0.5") as d, _Load(
            d, dict.fromkeys(keys, 3000.0)
        ):  # fmt: skip
            cache = HotCache.from_url(rs.url)
            try:
                took = _dropped_within(cache, keys[0], partial(data.set, keys[0], b"v1"))
                assert took < BOUND
                n0, t0 = d.metric("hotkeyd_watch_invalidations_total"), time.monotonic()
                time.sleep(1.0)
                rate = (d.metric("hotkeyd_watch_invalidations_total") - n0) / (
                    time.monotonic() - t0
                )
                # per key at most 2 broadcasts per spacing period (+ slack for scheduling)
                assert rate < 1.5 * len(keys) * 2 / REARM_SPACING, rate
            finally:
                cache.close()
