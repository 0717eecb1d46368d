"""Broker down at start and restarted mid-run: retries, clear metrics, no crash."""

from __future__ import annotations

import collections
import logging

import pytest
from kafka_testutil import create_topic, drain, producer, settings

from hotkeyd.metrics import Metrics
from hotkeyd.sources.kafka.source import KafkaSource
from hotkeyd.testing import KafkaBroker, free_port

pytestmark = [
    pytest.mark.integration,
    # kafka-python leaks the socket of each refused connect (see conftest); not ours.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("kafka_python_socket_leaks"),
]


def test_broker_down_at_start_then_restarted_mid_run(
    unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hotkeyd.sources.kafka.source")
    broker = KafkaBroker(port=free_port())  # not started yet: the daemon starts first
    topic = f"acc-{unique}"
    metrics = Metrics()
    src = KafkaSource(
        settings(broker.bootstrap, topic, group=f"g-{unique}", format="key"), metrics=metrics
    )
    src.start()
    errors = metrics.source_errors
    try:
        assert drain(
            [src],
            lambda: errors.labels(source="kafka", kind="connect")._value.get() >= 1,
            timeout=15,
        )
        assert not src.connected

        broker.start()
        create_topic(broker.bootstrap, topic, partitions=2)
        assert drain([src], lambda: len(src.assignment()) == 2, timeout=30)
        p = producer(broker.bootstrap)
        for _ in range(200):
            p.send(topic, key=b"before")
        p.flush()
        p.close()
        counters: dict[int, collections.Counter[bytes]] = {}
        assert drain([src], lambda: counters.get(0, {}).get(b"before", 0) >= 200, counters=counters)  # type: ignore[call-overload]

        # Tansu keeps topics and offsets in memory only, so a restart loses the topic (and the
        # group's committed offsets): recreate it, as an operator's provisioning would. The
        # source's position is now past the end of the new, empty log; it must notice and
        # read the new log from the start instead of waiting forever.
        broker.restart(down_for=3.0)
        create_topic(broker.bootstrap, topic, partitions=2)
        p = producer(broker.bootstrap)
        for _ in range(150):
            p.send(topic, key=b"after")
        p.flush()
        p.close()
        assert drain(
            [src], lambda: counters[0].get(b"after", 0) >= 150, counters=counters, timeout=60
        )
        assert src.connected
    finally:
        src.close()
        broker.stop()
    assert counters[0][b"before"] == 200
    assert counters[0][b"after"] == 150
    assert errors.labels(source="kafka", kind="disconnected")._value.get() >= 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("cannot connect" in m for m in messages)
    assert any("no connection to any broker" in m for m in messages)
    caplog.clear()  # its records hold kafka-python exceptions that reference leaked sockets
