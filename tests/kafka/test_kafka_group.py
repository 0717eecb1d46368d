"""Two daemons in one consumer group: partitions split, no key counted twice, takeover."""

from __future__ import annotations

import collections

import pytest
from kafka_testutil import create_topic, drain, producer, settings, wait_assigned

from hotkeyd.client.reporter import partition_for
from hotkeyd.metrics import Metrics
from hotkeyd.sources.kafka.source import KafkaSource
from hotkeyd.testing import KafkaBroker

pytestmark = pytest.mark.integration

PARTITIONS = 4
HOT = b"item:hot"


def send_key_partitioned(bootstrap: str, topic: str, keys: list[bytes]) -> None:
    """One record per access, partitioned by accessed key as the reporter does."""
    p = producer(bootstrap)
    for k in keys:
        p.send(topic, key=k, partition=partition_for(k, PARTITIONS))
    p.flush()
    p.close()


def test_two_members_split_partitions_and_keys_then_one_takes_over(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    topic, group = f"acc-{unique}", f"g-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=PARTITIONS)
    s = settings(kafka_broker.bootstrap, topic, group=group, format="key")
    m1, m2 = Metrics(), Metrics()
    a = KafkaSource(s, metrics=m1)
    b = KafkaSource(s.with_options(client_id="hotkeyd-b"), metrics=m2)
    a.start()
    b.start()
    try:
        assert wait_assigned([a, b], PARTITIONS), (a.assignment(), b.assignment())
        assert a.assignment().isdisjoint(b.assignment())

        keys = [HOT if i % 4 == 0 else b"item:%d" % (i % 200) for i in range(4000)]
        send_key_partitioned(kafka_broker.bootstrap, topic, keys)
        counters: dict[int, collections.Counter[bytes]] = {}
        total = lambda: sum(sum(c.values()) for c in counters.values())  # noqa: E731
        assert drain([a, b], lambda: total() >= len(keys), counters=counters)
        drain([a, b], lambda: False, timeout=1.0, counters=counters)  # nothing is delivered twice
        ca, cb = counters.get(0, collections.Counter()), counters.get(1, collections.Counter())
        assert ca and cb  # both members did work
        assert not (set(ca) & set(cb))  # no key counted by both
        assert ca + cb == collections.Counter(keys)  # together: exactly what one daemon would see
        owner = ca if HOT in ca else cb
        assert owner[HOT] == 1000
        assert m1.rebalances.labels(event="assigned")._value.get() >= 1

        # The member that owns the hot key leaves; the other takes its partitions over
        # from the committed offsets and sees the hot key's new accesses.
        leaving, staying = (a, b) if HOT in ca else (b, a)
        stay_metrics = m2 if staying is b else m1
        leaving.close()
        assert wait_assigned([staying], PARTITIONS)
        assert stay_metrics.rebalances.labels(event="revoked")._value.get() >= 1
        more = [HOT] * 300 + [b"item:x%d" % i for i in range(100)]
        send_key_partitioned(kafka_broker.bootstrap, topic, more)
        after: dict[int, collections.Counter[bytes]] = {}
        assert drain([staying], lambda: sum(after.get(0, {}).values()) >= len(more), counters=after)
        drain([staying], lambda: False, timeout=1.0, counters=after)
        assert after[0] == collections.Counter(more)  # committed offsets: no replay of old records
    finally:
        a.close()
        b.close()
