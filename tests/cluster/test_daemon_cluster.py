"""``hotkeyd run --redis-url redis://<any cluster node>`` publishes to a Redis Cluster."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis
from redis.cluster import RedisCluster

from hotkeyd.protocol.wire import Message, Namespace
from hotkeyd.testing import RedisClusterServers
from tests.service.daemon import Daemon, Listener

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("node", [0, 1, 2])
def test_daemon_publishes_to_a_cluster_from_any_node(
    redis_cluster: RedisClusterServers, unique: str, node: int
) -> None:
    ns = Namespace(f"hk{unique}")
    url = redis_cluster.nodes[node].url
    # PUBLISH on a cluster reaches every node: listen on another one than the daemon's.
    listener = Listener(redis_cluster.nodes[(node + 1) % 3].url, ns.channel)
    rc = RedisCluster.from_url(redis_cluster.url)
    try:
        with Daemon("--redis-url", url, "--namespace", ns.prefix) as d:
            d.feed_rate({b"item:cluster": 3000.0}, 1.2)
            assert listener.wait_for(lambda: b"item:cluster" in listener.hot_keys(), 5), d.stderr
            instance = listener.messages[-1][1].instance
            snap = Message.loads(rc.get(ns.snapshot(instance)))  # type: ignore[arg-type]
            assert b"item:cluster" in {h.key for h in snap.hot}
            assert rc.zscore(ns.instances, instance) is not None
            check = subprocess.run(
                [sys.executable, "-m", "hotkeyd", "check", "--redis-url",
                 redis_cluster.nodes[(node + 2) % 3].url, "--namespace", ns.prefix],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert check.returncode == 0 and check.stdout.startswith("ok"), check.stderr
            assert d.metric("hotkeyd_publish_failures_total") == 0
            assert d.stop() == 0
        assert rc.get(ns.snapshot(instance)) is None  # a clean stop removes its snapshot
    finally:
        listener.close()
        rc.close()


def test_sharded_pubsub_reaches_ssubscribers(
    redis_cluster: RedisClusterServers, unique: str
) -> None:
    ns = Namespace(f"hk{unique}", sharded=True)
    rc = RedisCluster.from_url(redis_cluster.url)
    ps = rc.pubsub()
    ps.ssubscribe(ns.channel)
    got: list[Message] = []
    watch = subprocess.Popen(
        [sys.executable, "-m", "hotkeyd", "watch", "--redis-url", redis_cluster.nodes[2].url,
         "--namespace", ns.prefix, "--sharded-pubsub", "--json", "--count", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # let watch subscribe
    try:
        with Daemon("--redis-url", redis_cluster.url, "--namespace", ns.prefix,
                    "--sharded-pubsub") as d:  # fmt: skip
            d.feed_rate({b"item:sharded": 3000.0}, 1.2)
            for _ in range(100):
                m = ps.get_sharded_message(timeout=0.05)
                if m and m["type"] == "smessage":
                    got.append(Message.loads(m["data"]))
                if any(h.key == b"item:sharded" for g in got for h in g.hot):
                    break
            assert d.stop() == 0
        out, err = watch.communicate(timeout=20)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        ps.close()
        rc.close()
    assert any(h.key == b"item:sharded" for g in got for h in g.hot)
    assert watch.returncode == 0, err
    assert Message.loads(out.splitlines()[0]).instance  # `hotkeyd watch` saw it too


def test_plain_client_on_a_cluster_node_fails_with_the_real_cause(
    redis_cluster: RedisClusterServers, unique: str
) -> None:
    from hotkeyd.conn.redis import translate_redis_error

    ns = Namespace(f"hk{unique}")
    slot_owner = redis_cluster.node_for(ns.instances)
    other = next(n for n in redis_cluster.nodes if n is not slot_owner)
    with pytest.raises(redis.exceptions.ResponseError) as info:
        redis.Redis(port=other.port).zadd(ns.instances, {"x": 1})
    err = translate_redis_error(info.value, other.url)
    assert "Redis Cluster node" in str(err) and "?cluster=yes" in str(err)
