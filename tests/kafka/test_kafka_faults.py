"""Faults of the Kafka source (issue 14): codecs, poison records, a raising or stuck poll.

Each test runs the real source against a real (Tansu) broker and asserts what was counted,
lost and reported, in figures.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any

import kafka.codec
import pytest
from kafka import KafkaConsumer
from kafka_testutil import create_topic, drain, producer, read_all, settings

from hotkeyd.metrics import Metrics
from hotkeyd.sources.kafka.source import KafkaSource
from hotkeyd.testing import KafkaBroker

pytestmark = pytest.mark.integration

CODECS = ["gzip", "snappy", "lz4", "zstd"]


def _value(metrics: Metrics, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_decodes(kafka_broker: KafkaBroker, unique: str, codec: str) -> None:
    """A compressed batch of each standard codec is counted exactly (kafka-python extras)."""
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    p = producer(kafka_broker.bootstrap, compression_type=codec)
    for i in range(600):
        p.send(topic, key=b"hot" if i % 3 else b"k%d" % i)
    p.flush()
    p.close()
    metrics = Metrics()
    src = KafkaSource(
        settings(kafka_broker.bootstrap, topic, group=f"g-{unique}", format="key"), metrics=metrics
    )
    src.start()
    counters: dict[int, collections.Counter[bytes]] = {}
    try:
        assert drain([src], lambda: sum(counters.get(0, {}).values()) >= 600, counters=counters)
    finally:
        src.close()
    assert counters[0][b"hot"] == 400
    assert sum(counters[0].values()) == 600
    assert _value(metrics, "hotkeyd_source_errors_total", {"source": "kafka", "kind": "poll"}) == 0


def test_deeply_nested_json_record_is_one_bad_record(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    """RecursionError in one record: that record is malformed and dead-lettered, the rest count.

    Before the fix the whole poll (up to max_poll_records) was lost, uncounted, while the
    committed offset moved past it (measured: 10 of 1,010 good accesses counted).
    """
    topic, dlq = f"acc-{unique}", f"dlq-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    create_topic(kafka_broker.bootstrap, dlq, partitions=1)
    p = producer(kafka_broker.bootstrap)
    good = json.dumps({"key": "good", "count": 1}).encode()
    for _ in range(500):
        p.send(topic, value=good)
    p.send(topic, value=b"[" * 100_000 + b"]" * 100_000)  # deep nesting: RecursionError
    for _ in range(510):
        p.send(topic, value=good)
    p.flush()
    p.close()
    metrics = Metrics()
    s = settings(kafka_broker.bootstrap, topic, group=f"g-{unique}", format="json", dlq_topic=dlq)
    src = KafkaSource(s, metrics=metrics)
    src.start()
    counters: dict[int, collections.Counter[bytes]] = {}
    try:
        assert drain([src], lambda: counters.get(0, {}).get(b"good", 0) >= 1010, counters=counters)  # type: ignore[call-overload]
        drain([src], lambda: False, timeout=1.0, counters=counters)  # nothing more arrives
    finally:
        src.close()
    assert counters[0][b"good"] == 1010
    bad = _value(
        metrics, "hotkeyd_source_malformed_total", {"source": "kafka", "reason": "undecodable"}
    )
    assert bad == 1
    forwarded = read_all(kafka_broker.bootstrap, dlq, 1)
    assert len(forwarded) == 1
    assert forwarded[0].value.startswith(b"[[[")
    # the committed offset covers all 1,011 records, and nothing was lost on the way
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=f"g-{unique}")
    try:
        from kafka import TopicPartition

        assert c.committed(TopicPartition(topic, 0)) == 1011
    finally:
        c.close()


def test_a_poll_that_raises_gets_a_fresh_consumer(
    kafka_broker: KafkaBroker, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undecodable batch (codec missing) makes poll raise; the source never re-polls that
    consumer (its fetcher can spin at 100 % CPU for good), reports the error, and a fresh
    consumer reads everything once the batch can be decoded. The waits between consumers
    grow: every fresh one fails on that batch again."""
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    p = producer(kafka_broker.bootstrap, compression_type="zstd")
    for _ in range(300):
        p.send(topic, key=b"z")
    p.flush()
    p.close()
    monkeypatch.setattr(kafka.codec, "zstd", None)  # the fault: a deployment without zstd
    built: list[Any] = []
    asked: list[float] = []  # when the source asked for a consumer
    closed: list[float] = []  # when it had closed the failed one (then it waits)

    class Timed(KafkaConsumer):
        def close(self, *a: Any, **kw: Any) -> None:
            super().close(*a, **kw)
            closed.append(time.monotonic())

    def factory(**kw: Any) -> Any:
        asked.append(time.monotonic())
        c = Timed(**kw)
        built.append(c)
        return c

    metrics = Metrics()
    s = settings(kafka_broker.bootstrap, topic, group=f"g-{unique}", format="key")
    src = KafkaSource(s, metrics=metrics, consumer_factory=factory, lag_every=0)
    src.start()
    counters: dict[int, collections.Counter[bytes]] = {}
    poll_errors = metrics.source_errors.labels(source="kafka", kind="poll")
    try:
        assert drain([src], lambda: len(built) >= 4, counters=counters, timeout=30)
        assert poll_errors._value.get() >= 3
        assert src.error is not None and "UnsupportedCodecError" in src.error
        # a new consumer after each failure, after a growing wait (Backoff: 0.25-0.5 s,
        # 0.5-1 s, 1-2 s), which the reconnect in between does not reset
        waits = [b - a for a, b in zip(closed, asked[1:4], strict=False)]
        assert 0.2 <= waits[0] <= 0.9 and 0.45 <= waits[1] <= 1.4 and 0.95 <= waits[2] <= 2.5, waits
        assert sum(counters.get(0, {}).values()) == 0
        monkeypatch.undo()  # the codec is back (an operator installed it)
        assert drain([src], lambda: counters.get(0, {}).get(b"z", 0) >= 300, counters=counters)  # type: ignore[call-overload]
        assert src.error is None
    finally:
        src.close()
    assert counters[0][b"z"] == 300
    assert all(c._closed for c in built[:-1])  # every failed consumer was closed, not re-polled


def test_stuck_poll_is_unhealthy_lag_grows_and_close_is_bounded(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    """A poll that never returns: the watchdog reports it, lag keeps growing, close() is bounded."""
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    hang = threading.Event()
    release = threading.Event()

    class StuckAfterAssignment(KafkaConsumer):
        def poll(self, *a: Any, **kw: Any) -> Any:
            if hang.is_set():
                release.wait(60)  # the fault: a poll that does not return
            return super().poll(*a, **kw)

    metrics = Metrics()
    s = settings(kafka_broker.bootstrap, topic, group=f"g-{unique}", format="key")
    src = KafkaSource(
        s,
        metrics=metrics,
        consumer_factory=StuckAfterAssignment,
        stall_after=1.5,
        close_timeout=2.0,
        lag_every=0.5,
    )
    src.start()
    p = producer(kafka_broker.bootstrap)
    counters: dict[int, collections.Counter[bytes]] = {}
    try:
        assert drain([src], lambda: bool(src.assignment()), counters=counters)
        for _ in range(50):
            p.send(topic, key=b"before")
        p.flush()
        assert drain([src], lambda: counters.get(0, {}).get(b"before", 0) >= 50, counters=counters)  # type: ignore[call-overload]
        hang.set()
        time.sleep(0.5)
        assert src.unhealthy is None or "poll" in src.unhealthy
        deadline = time.monotonic() + 10
        while src.unhealthy is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert src.unhealthy is not None and "has not returned" in src.unhealthy
        for _ in range(30):  # separate batches: Tansu's ListOffsets counts to the last batch
            for _ in range(10):
                p.send(topic, key=b"during")
            p.flush()
        lag = {"topic": topic, "partition": "0"}
        deadline = time.monotonic() + 10
        while _value(metrics, "hotkeyd_kafka_consumer_lag_messages", lag) < 250:
            assert time.monotonic() < deadline, "lag froze while the consumer was stuck"
            time.sleep(0.2)
    finally:
        t0 = time.monotonic()
        src.close()
        took = time.monotonic() - t0
        release.set()
        p.close()
    assert took < 4.0  # close_timeout 2 s (plus the lag probe's 2 s at worst)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_frozen_broker_is_reported_as_an_outage(
    kafka_broker: KafkaBroker, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that stops answering for 5 s with its sockets open (SIGSTOP): the
    connection state shows nothing, the lag probe reports it once, and its recovery."""
    import logging
    import signal

    caplog.set_level(logging.INFO, logger="hotkeyd.sources.kafka.lag")
    topic = f"acc-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    metrics = Metrics()
    s = settings(kafka_broker.bootstrap, topic, group=f"g-{unique}", format="key")
    src = KafkaSource(s, metrics=metrics, lag_every=0.5)
    src.start()
    unresponsive = metrics.source_errors.labels(source="kafka", kind="unresponsive")
    try:
        assert drain([src], lambda: len(src.assignment()) == 2)
        drain([src], lambda: False, timeout=1.5)
        assert unresponsive._value.get() == 0
        assert kafka_broker.proc is not None
        kafka_broker.proc.send_signal(signal.SIGSTOP)
        try:
            assert drain([src], lambda: unresponsive._value.get() >= 1, timeout=8)
        finally:
            kafka_broker.proc.send_signal(signal.SIGCONT)
        messages = lambda: [r.getMessage() for r in caplog.records]  # noqa: E731
        assert drain([src], lambda: any("answer again" in m for m in messages()), timeout=20), (
            messages()
        )
    finally:
        src.close()
    assert unresponsive._value.get() == 1
    assert any("no answer from the brokers" in m for m in messages())
    caplog.clear()
