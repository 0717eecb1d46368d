"""The watch on a 3-primary Redis Cluster: one watch per primary, each key armed on the
primary that owns its slot; a direct write on any primary drops the apps' copies; a
CLUSTER FAILOVER during writes moves the watch to the new primary within the lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from hotkeyd.client import HotCache
from hotkeyd.client.watchguard import LEASE_S
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
            assert wait_until(lambda: d.metric("hotkeyd_watch_keys") == 3, timeout=10), d.stderr
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


class _Writer:
    """Writes generation-stamped values of ``key`` through a cluster client (which follows
    MOVED), recording when each write returned; the faults test's writer, in-process."""

    def __init__(self, url: str, key: bytes, period: float = 0.02, start: int = 1) -> None:
        self.url, self.key, self.period, self.start = url, key, period, start
        self.done: list[tuple[int, float]] = []  # (generation, monotonic time it returned)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        data = RedisCluster.from_url(self.url, socket_timeout=2.0)
        gen = self.start
        try:
            while not self._stop.is_set():
                try:
                    data.set(self.key, b"%d" % gen)
                except (redis.RedisError, RedisClusterException, OSError):
                    self._stop.wait(self.period)
                    continue
                self.done.append((gen, time.monotonic()))
                gen += 1
                self._stop.wait(self.period)
        finally:
            data.close()

    def __enter__(self) -> _Writer:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)


def _staleness(reads: list[tuple[float, int, bool]], writes: list[tuple[int, float]]) -> float:
    """The worst staleness of the reads (start, generation, served locally): how long
    before the read began had a newer generation's write returned (0: none was)."""
    worst = 0.0
    for start, gen, _local in reads:
        newer = [t for g, t in writes if g > gen and t < start]
        if newer:
            worst = max(worst, start - min(newer))
    return worst


def test_strict_a_failover_stops_stale_serving_within_the_lease(
    own_redis_cluster: RedisClusterServers,
) -> None:
    """A CLUSTER FAILOVER during writes: writes go to the new primary at once. The old
    primary's watch must stop vouching for its slots and the new primary be armed, so a
    strict app never serves a value older than a write to the new primary by more than
    the 300 ms lease."""
    _strict_failover(own_redis_cluster)


def test_strict_a_failover_on_valkey() -> None:
    """The same on a Valkey cluster (CLUSTER SLOTS and FAILOVER behave alike there)."""
    from tests.conftest import _missing

    try:
        cluster = RedisClusterServers(primaries=3, replicas=1, flavor="valkey")
    except FileNotFoundError as exc:
        _missing(str(exc))
    with cluster:
        _strict_failover(cluster, "valkey")


def _strict_failover(cluster: RedisClusterServers, flavor: str = "redis") -> None:
    key = b"w:strict-failover"
    RedisCluster.from_url(cluster.url).set(key, b"0")
    with DaemonProcess("--redis-url", cluster.url, "--window", "0.5") as d, _Load(
        d, {key: 3000.0}
    ):  # fmt: skip
        cache = HotCache.from_url(cluster.url, consistency="strict")
        try:
            old = cluster.node_for(key)
            assert wait_until(
                lambda: d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{old.port}") == 1,
                timeout=10,
            ), d.stderr
            assert wait_until(lambda: _local_read(cache, key), timeout=5), cache.watch_stats
            new = _during(
                cache, cluster, key, 1, partial(cluster.failover, old), f"{flavor} failover"
            )
            assert new is not None, "the failover did not finish"
            # the new primary is watched, and its copies are served locally again
            assert wait_until(
                lambda: d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{new.port}") == 1,
                timeout=5,
            ), d.stderr
            assert wait_until(lambda: _local_read(cache, key), timeout=5), cache.watch_stats
            data = RedisCluster.from_url(cluster.url)
            try:  # and a direct write on the new primary drops the copy at once
                took = _dropped(cache, key, partial(data.set, key, b"after"))
            finally:
                data.close()
            print(f"{flavor}: after the failover, a write dropped the copy in {took * 1000:.2f} ms")
            assert took < BOUND
            # A live slot move (writes follow ASK to the target while the slot migrates,
            # then MOVED): the source stops vouching at its first ASK, the target is armed.
            dst = next(n for n in cluster.nodes if n is not new and cluster._is_primary(n))
            slot = key_slot(key)
            move = partial(cluster.migrate_slot, slot, dst, pause=0.3)
            _during(cache, cluster, key, 2, move, f"{flavor} slot move")
            assert wait_until(
                lambda: d.metric("hotkeyd_watch_keys", node=f"127.0.0.1:{dst.port}") == 1,
                timeout=5,
            ), d.stderr
            assert wait_until(lambda: _local_read(cache, key), timeout=5), cache.watch_stats
        finally:
            cache.close()


def _during(
    cache: HotCache,
    cluster: RedisClusterServers,
    key: bytes,
    phase: int,
    action: Callable[[], Any],
    what: str,
) -> Any:
    """Strict reads of ``key`` while a writer writes and ``action`` runs, and 1.5 s after:
    asserts no read is staler than the lease; returns what ``action`` returned."""
    reads: list[tuple[float, int, bool]] = []
    done = threading.Event()
    out: list[Any] = []

    def act() -> None:
        try:
            out.append(action())
        finally:
            done.set()

    with _Writer(cluster.url, key, start=phase * 1_000_000) as w:
        time.sleep(0.3)
        threading.Thread(target=act, daemon=True).start()
        end = None
        while end is None or time.monotonic() < end:
            if end is None and done.is_set():
                end = time.monotonic() + 1.5  # and a while after it settled
            item = cache.hotset.items.get(key)
            served = item.served if item else 0
            t0 = time.monotonic()
            v = cache.get(key)
            item = cache.hotset.items.get(key)
            reads.append((t0, int(v or b"0"), bool(item and item.served > served)))
            time.sleep(0.001)
        writes = list(w.done)
    worst = _staleness(reads, writes)
    local = sum(1 for r in reads if r[2])
    print(
        f"strict, {what}: {len(reads)} reads ({local} local), {len(writes)} writes, "
        f"worst staleness {worst * 1000:.0f} ms (lease {LEASE_S * 1000:.0f} ms)"
    )
    assert worst < LEASE_S, (what, worst)
    return out[0] if out else None


def _local_read(cache: HotCache, key: bytes) -> bool:
    item = cache.hotset.items.get(key)
    before = item.served if item else 0
    cache.get(key)
    cache.get(key)
    item = cache.hotset.items.get(key)
    return item is not None and item.served >= before + 1
