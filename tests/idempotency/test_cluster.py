"""The guard on a real Redis Cluster: records are one key per script."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency import IdempotencyGuard, IdempotencyUnavailable, Outcome
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisClusterServers

pytestmark = pytest.mark.integration


def test_guard_on_a_cluster(redis_cluster: RedisClusterServers, unique: str) -> None:
    rc = RedisCluster.from_url(redis_cluster.url)
    try:
        with pytest.raises(ConfigError, match="audit_maxlen=0"):
            IdempotencyGuard(rc)  # type: ignore[arg-type]
        guard = IdempotencyGuard(rc, namespace=Namespace(f"c-{unique}"), audit_maxlen=0)  # type: ignore[arg-type]
        slots = set()
        for i in range(30):  # keys spread over the cluster's slots and nodes
            b = guard.begin(f"order-{i}", b"x")
            assert b.outcome is Outcome.NEW and b.lease is not None
            slots.add(rc.keyslot(b.lease.record))
            guard.complete(b.lease, str(i).encode())
        for i in range(30):
            assert guard.begin(f"order-{i}", b"x").result == str(i).encode()
        assert len(slots) > 20
    finally:
        rc.close()


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_a_cluster_that_is_down_fails_closed_or_open(unique: str, mode: str) -> None:
    """redis-py raises RedisClusterException (not a RedisError) when no node answers."""
    with RedisClusterServers() as cluster:  # its own: every node is stopped
        _down_cluster(cluster, unique, mode)


def _down_cluster(cluster: RedisClusterServers, unique: str, mode: str) -> None:
    rc = RedisCluster.from_url(cluster.url)
    try:
        guard = IdempotencyGuard(
            rc,  # type: ignore[arg-type]
            namespace=Namespace(f"c-{unique}"),
            audit_maxlen=0,
            on_error=mode,
        )
        assert guard.begin("before", b"x").outcome is Outcome.NEW
        for node in cluster.nodes:
            node.stop()
        if mode == "closed":
            with pytest.raises(IdempotencyUnavailable):
                guard.begin("after", b"x")
        else:
            b = guard.begin("after", b"x")
            assert b.outcome is Outcome.NEW and b.lease is not None and not b.lease.guarded
        assert guard.stats.unavailable == 1
    finally:
        rc.close()
