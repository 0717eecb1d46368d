"""End to end through the real daemon: Reporter -> Kafka -> ``hotkeyd run`` -> Redis channel."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from kafka_testutil import create_topic

from hotkeyd.reporter import Reporter
from hotkeyd.testing import KafkaBroker, RedisServer
from hotkeyd.wire import Message, Namespace

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
    proc = subprocess.Popen(
        [sys.executable, "-m", "hotkeyd", "run", "-s", url, "--redis-url", redis_server.url,
         "--namespace", ns.prefix, "--rules", str(rules), "--no-http", "--log-level", "warning"],
    )  # fmt: skip
    rep = Reporter(kafka_broker.bootstrap, topic, flush_interval=0.1)
    hot_seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + 60
        while b"item:hot" not in hot_seen and time.monotonic() < deadline:
            assert proc.poll() is None, "the daemon exited"
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
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert b"item:hot" in hot_seen, "the daemon never published item:hot"
    assert not any(k.startswith(b"item:cold") for k in hot_seen)
