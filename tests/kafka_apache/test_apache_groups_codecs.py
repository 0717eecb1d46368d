"""Against real Apache Kafka (KRaft): consumer groups and every compression codec."""

from __future__ import annotations

import collections

import pytest
from apache_broker import ApacheKafka, create_topic
from kafka import KafkaProducer
from kafka_testutil import drain, settings, wait_assigned

from hotkeyd.metrics import Metrics
from hotkeyd.sources.kafka.source import KafkaSource

pytestmark = pytest.mark.integration


def test_members_split_partitions_and_rebalance_on_join_and_leave(
    apache_kafka: ApacheKafka, topic_name: str
) -> None:
    bs = apache_kafka.bootstrap
    create_topic(bs, topic_name, partitions=4)
    # Joins and leaves are what this test is about; a member lost to a missed heartbeat
    # is not. With the fast groups' 6 s session a loaded CI box once stalled member b's
    # heartbeats for 6 s, the broker removed it, and b never noticed (open, CHANGELOG).
    s = settings(bs, topic_name, group=f"g-{topic_name}", format="key", session_timeout_ms=15000)
    a = KafkaSource(s, metrics=Metrics())
    b = KafkaSource(s.with_options(client_id="hotkeyd-b"), metrics=Metrics())
    c = KafkaSource(s.with_options(client_id="hotkeyd-c"), metrics=Metrics())
    a.start()
    b.start()
    try:
        assert wait_assigned([a, b], 4), (a.assignment(), b.assignment())
        even = lambda: len(a.assignment()) == len(b.assignment()) == 2  # noqa: E731
        assert drain([a, b], even, timeout=20), (a.assignment(), b.assignment())
        p = KafkaProducer(bootstrap_servers=bs, linger_ms=5)
        for i in range(2000):
            p.send(topic_name, key=b"k:%d" % (i % 100))
        p.flush()
        counters: dict[int, collections.Counter[bytes]] = {}
        total = lambda: sum(sum(x.values()) for x in counters.values())  # noqa: E731
        assert drain([a, b], lambda: total() >= 2000, counters=counters)
        assert counters[0] and counters[1] and not (set(counters[0]) & set(counters[1]))
        # a third member joins: the four partitions are spread over three
        c.start()
        assert wait_assigned([a, b, c], 4), (a.assignment(), b.assignment(), c.assignment())
        # it leaves: the other two own everything again
        c.close()
        assert wait_assigned([a, b], 4), (a.assignment(), b.assignment())
        for i in range(400):
            p.send(topic_name, key=b"after:%d" % (i % 10))
        p.flush()
        p.close()
        after: dict[int, collections.Counter[bytes]] = {}
        got = lambda: sum(v for x in after.values() for k, v in x.items() if k.startswith(b"after"))  # noqa: E731
        assert drain([a, b], lambda: got() >= 400, counters=after)
        assert got() == 400
    finally:
        for src in (a, b, c):
            src.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec(apache_kafka: ApacheKafka, topic_name: str, codec: str) -> None:
    """Producer-side compression; the broker keeps the producer's codec (compression.type=producer)."""
    bs = apache_kafka.bootstrap
    create_topic(bs, topic_name, partitions=1)
    p = KafkaProducer(
        bootstrap_servers=bs, compression_type=codec, linger_ms=20, batch_size=1 << 16
    )
    expected: collections.Counter[bytes] = collections.Counter()
    for i in range(3000):
        value = b"item:%d\t%d\n" % (i % 50, 1 + i % 3)  # counted lines
        expected[b"item:%d" % (i % 50)] += 1 + i % 3
        p.send(topic_name, value=value)
    p.flush()
    p.close()
    metrics = Metrics()
    src = KafkaSource(
        settings(bs, topic_name, group=f"g-{topic_name}", format="lines"), metrics=metrics
    )
    src.start()
    try:
        counters: dict[int, collections.Counter[bytes]] = {}
        assert drain(
            [src],
            lambda: sum(counters.get(0, collections.Counter()).values()) >= sum(expected.values()),
            counters=counters,
        ), counters
        assert counters[0] == expected
        assert not metrics.registry.get_sample_value(
            "hotkeyd_source_errors_total", {"source": "kafka", "kind": "poll"}
        )
    finally:
        src.close()
