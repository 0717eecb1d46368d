"""Each Kafka record format end to end: producer -> Tansu topic -> ``hotkeyd run`` -> Redis channel.

The reporter format has its own end-to-end test (test_kafka_daemon_e2e.py); this file
covers ``key``, ``raw``, ``lines`` and ``json``, each with its own fresh broker, topic,
consumer group and channel, and the daemon as a real subprocess.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from kafka_testutil import create_topic, producer
from service.daemon import Daemon, Listener

from hotkeyd.protocol.formats import encode_json_record
from hotkeyd.testing import KafkaBroker, RedisServer

pytestmark = [pytest.mark.integration]

RULES = """
[default]
threshold = 300
ttl = 2.0
cooldown = 0.5
"""

HOT = b"item:hot"
COLD = [b"item:cold:%d" % i for i in range(10)]

Record = tuple[bytes | None, bytes | None]  # (key, value)


def _slice(fmt: str) -> Sequence[Record]:
    """The records of one 0.1 s slice: 60 accesses of HOT (~600/s), one per cold key (~10/s)."""
    if fmt == "key":
        return [(HOT, b"")] * 60 + [(k, b"") for k in COLD]
    if fmt == "raw":
        return [(None, HOT)] * 60 + [(None, k) for k in COLD]
    if fmt == "lines":  # one plain record and one counted record
        plain = HOT + b"\n" + b"".join(HOT + b"\n" for _ in range(29)) + b"\n".join(COLD)
        return [(None, plain), (None, HOT + b"\t30\n")]
    if fmt == "json":
        return [(None, encode_json_record(HOT, 6))] * 10 + [
            (None, encode_json_record(k)) for k in COLD
        ]
    raise AssertionError(fmt)


@pytest.mark.parametrize("fmt", ["key", "raw", "lines", "json"])
def test_format_through_the_daemon_publishes_exactly_the_hot_key(
    fmt: str, kafka_broker: KafkaBroker, shared_redis: RedisServer, unique: str, tmp_path: Path
) -> None:
    topic = f"acc-{fmt}-{unique}"
    channel = f"hk:{fmt}:{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    url = (
        f"kafka://{kafka_broker.bootstrap}/{topic}?group=g-{unique}&format={fmt}&start=earliest"
        "&session_timeout_ms=6000&heartbeat_interval_ms=1000"
    )
    records = _slice(fmt)
    listener = Listener(shared_redis.url, channel)
    prod = producer(kafka_broker.bootstrap)
    try:
        with Daemon(
            "-s", url, "--redis-url", shared_redis.url, "--channel", channel,
            "--rules", str(rules),
        ) as d:  # fmt: skip
            deadline = time.monotonic() + 40
            while HOT not in listener.hot_keys() and time.monotonic() < deadline:
                assert d.proc is not None and d.proc.poll() is None, d.stderr
                t0 = time.monotonic()
                for key, value in records:
                    prod.send(topic, key=key, value=value)
                prod.flush()
                time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
            assert HOT in listener.hot_keys(), f"{fmt}: never published; {d.stderr[-2000:]}"
            assert d.metric("hotkeyd_source_malformed_total") == 0
            assert d.metric("hotkeyd_source_events_total", source="kafka") >= 300
            assert d.stop() == 0
    finally:
        prod.close()
        listener.close()
    assert set(listener.hot_keys()) == {HOT}
    assert listener.messages[-1][1].final
