"""End to end through the real daemon: Reporter -> Kafka -> ``hotkeyd run`` -> Redis channel."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis
from kafka_testutil import create_topic

from hotkeyd.client.reporter import Reporter, partition_for
from hotkeyd.protocol.wire import Message, Namespace, decode_key
from hotkeyd.testing import DaemonProcess, KafkaBroker, RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RULES = """
[default]
threshold = 300
ttl = 2.0
cooldown = 0.5
"""


def test_reporter_traffic_makes_the_daemon_publish_the_hot_key(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=3)
    ns = Namespace(prefix=f"hk-{unique}")
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    url = (
        f"kafka://{kafka_broker.bootstrap}/{topic}?group=g-{unique}&format=reporter&start=earliest"
        "&session_timeout_ms=6000&heartbeat_interval_ms=1000"
    )
    r = redis.Redis.from_url(redis_server.url)
    sub = r.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(ns.channel)
    daemon = DaemonProcess(
        "-s", url, "--redis-url", redis_server.url, "--namespace", ns.prefix,
        "--rules", str(rules), "--no-http",
        http=False, stdin=False, capture=False, log_level="warning",
    ).start()  # fmt: skip
    rep = Reporter(kafka_broker.bootstrap, topic, flush_interval=0.1)
    hot_seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + 60
        while b"item:hot" not in hot_seen and time.monotonic() < deadline:
            assert daemon.running, "the daemon exited"
            for i in range(100):  # ~2000/s of item:hot, ~10/s per cold key
                rep.record(b"item:hot", 2)
                rep.record(b"item:cold:%d" % (i % 10))
            time.sleep(0.1)
            while (msg := sub.get_message(timeout=0.0)) is not None:
                m = Message.loads(msg["data"])
                hot_seen.update(e.key for e in m.hot)
    finally:
        rep.close()
        sub.close()
        r.close()
        daemon.stop(15, force=True)
    assert b"item:hot" in hot_seen, "the daemon never published item:hot"
    assert not any(k.startswith(b"item:cold") for k in hot_seen)


def _daemon(url: str, redis_url: str, ns: Namespace, rules: Path, instance: str) -> DaemonProcess:
    return DaemonProcess(
        "-s", url, "--redis-url", redis_url, "--namespace", ns.prefix, "--rules", str(rules),
        "--no-http", "--instance", instance,
        http=False, stdin=False, capture=False, log_level="warning",
    ).start()  # fmt: skip


def _snapshot_hot(r: redis.Redis, ns: Namespace, instance: str) -> set[bytes]:
    raw = r.get(ns.snapshot(instance))
    if raw is None:
        return set()
    return {decode_key(e) for e in json.loads(raw).get("hot", [])}


def test_two_daemons_in_one_group_split_the_hot_keys(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    """Key-partitioned reporter traffic: each hot key is hot in exactly one daemon, and
    together the two daemons find every hot key (what one daemon alone would find)."""
    partitions = 4
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=partitions)
    ns = Namespace(prefix=f"hk-{unique}")
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    url = (
        f"kafka://{kafka_broker.bootstrap}/{topic}?group=g-{unique}&format=reporter&start=earliest"
        "&session_timeout_ms=6000&heartbeat_interval_ms=1000"
    )
    # Two hot keys per partition, so whatever the assignment, both daemons own some.
    hot: list[bytes] = []
    i = 0
    while len(hot) < 2 * partitions:
        k = b"hot:%d" % i
        if sum(partition_for(h, partitions) == partition_for(k, partitions) for h in hot) < 2:
            hot.append(k)
        i += 1
    r = redis.Redis.from_url(redis_server.url)
    procs = [_daemon(url, redis_server.url, ns, rules, name) for name in ("d1", "d2")]
    rep = Reporter(kafka_broker.bootstrap, topic, flush_interval=0.1)
    snaps: dict[str, set[bytes]] = {}
    try:
        deadline = time.monotonic() + 90
        settled = 0
        while time.monotonic() < deadline:
            assert all(p.running for p in procs), "a daemon exited"
            for _ in range(10):
                for k in hot:
                    rep.record(k, 15)  # ~1500/s per hot key (threshold 300)
                for j in range(20):
                    rep.record(b"cold:%d" % j)
                time.sleep(0.01)
            snaps = {name: _snapshot_hot(r, ns, name) for name in ("d1", "d2")}
            ok = snaps["d1"] and snaps["d2"] and not (snaps["d1"] & snaps["d2"])
            ok = ok and snaps["d1"] | snaps["d2"] == set(hot)
            settled = settled + 1 if ok else 0
            if settled >= 10:  # stable for ~1 s: the group has settled
                break
    finally:
        rep.close()
        r.close()
        for p in procs:  # both at once: they leave the group together
            p.signal(signal.SIGTERM)
        for p in procs:
            p.stop(15, force=True)
    assert snaps["d1"] and snaps["d2"], snaps
    assert not (snaps["d1"] & snaps["d2"]), "a key is hot in both daemons"
    assert snaps["d1"] | snaps["d2"] == set(hot)
