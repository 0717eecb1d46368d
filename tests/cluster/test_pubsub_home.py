"""Plain pub/sub on a cluster meets on one node: the invalidation channel's slot owner.

A PUBLISH reaches subscribers on other nodes over the cluster bus, whose outgoing links
Redis 7.0 leaves with Nagle's algorithm on: under load a message arrived up to ~40 ms
later there (the Java and Node apps of the stale-read harness, which subscribed on a
random node). So the daemon's watch publishes, and every SDK subscribes, on that node.
"""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster

from hotkeyd.client import Subscriber
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisClusterServers
from hotkeyd.watch.bus import _Bus
from tests.client.helpers import wait_until

from .helpers import get_calls


def _awkward(cluster: RedisClusterServers, unique: str) -> Namespace:
    """A namespace whose events and watch channels, and the bus URL's node, all live
    elsewhere than its invalidation channel (so the old routing would miss)."""
    for i in range(1000):
        ns = Namespace(f"hk{unique}-{i}")
        home = cluster.node_for(ns.invalidate_channel)
        others = {cluster.node_for(ns.channel), cluster.node_for(ns.watch_channel)}
        if home not in others and home.port != cluster.ports[0]:
            return ns
    raise AssertionError("no such namespace")


def _numsub(cluster: RedisClusterServers, channel: str) -> dict[int, int]:
    out = {}
    for p in cluster.ports:
        with redis.Redis(port=p) as r:
            out[p] = int(r.pubsub_numsub(channel)[0][1])
    return out


def test_the_python_subscriber_subscribes_on_the_home_node(
    redis_cluster: RedisClusterServers, unique: str
) -> None:
    ns = _awkward(redis_cluster, unique)
    home = redis_cluster.node_for(ns.invalidate_channel).port
    rc = RedisCluster.from_url(redis_cluster.url)
    try:
        with Subscriber(rc, namespace=ns):
            assert wait_until(
                lambda: sum(_numsub(redis_cluster, ns.invalidate_channel).values()) == 1
            )
            assert _numsub(redis_cluster, ns.invalidate_channel)[home] == 1
            assert _numsub(redis_cluster, ns.channel)[home] == 1
    finally:
        rc.close()


def test_the_watch_publishes_on_the_home_node(
    redis_cluster: RedisClusterServers, unique: str
) -> None:
    ns = _awkward(redis_cluster, unique)
    home = redis_cluster.node_for(ns.invalidate_channel)
    before = {n.port: get_calls(n, "publish") for n in redis_cluster.nodes}
    bus = _Bus(redis_cluster.url, ns, None)
    try:
        assert bus.send(ns.invalidate_channel, b"x")
        assert bus.send(ns.watch_channel, b"{}")  # the heartbeats too
    finally:
        bus.client.close()
    after = {n.port: get_calls(n, "publish") for n in redis_cluster.nodes}
    assert {p: after[p] - before[p] for p in after} == {
        p: (2 if p == home.port else 0) for p in after
    }
