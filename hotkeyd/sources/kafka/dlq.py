"""Forwarding bad Kafka records to a dead-letter topic.

Why a separate producer with short timeouts: the forwarder runs in the consumer thread,
so a slow or unreachable dead-letter topic must cost that thread at most a couple of
seconds, and must never turn a bad record into a crash. Failures are counted in
``hotkeyd_source_errors_total{kind="dlq"}`` and logged at a limited rate; successful
deliveries in ``hotkeyd_kafka_dead_letters_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hotkeyd.clock import Clock
from hotkeyd.conn.kafka import KafkaSettings
from hotkeyd.conn.producer import LazyProducer
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.formats import RecordLike
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["DeadLetters"]

logger = logging.getLogger(__name__)

_RETRY_CONNECT = 5.0


class DeadLetters:
    """Sends rejected records, with the reason in headers, to ``settings.dlq_topic``.

    Args:
        settings: the source's settings (same cluster and security).
        metrics: where deliveries and failures are counted.
        clock: for the reconnect back-off.
        producer_factory: ``f(**kwargs) -> KafkaProducer``; kafka-python's by default.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        metrics: Metrics,
        clock: Clock,
        producer_factory: Callable[..., Any] | None = None,
    ) -> None:
        if not settings.dlq_topic:
            raise ValueError("DeadLetters needs settings.dlq_topic")
        self.topic = settings.dlq_topic
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._log = RateLimitedLog(logger, 10.0, clock.monotonic)
        kwargs = settings.producer_kwargs()
        kwargs.update(max_block_ms=2_000, linger_ms=50)
        self._producer = LazyProducer(
            kwargs.pop("bootstrap_servers"),
            kwargs,
            monotonic=clock.monotonic,
            retry=_RETRY_CONNECT,
            factory=producer_factory,
            on_error=self._failed,
        )

    def forward(self, tp: Any, reason: str, rec: RecordLike) -> None:
        """Queue ``rec`` for the dead-letter topic; never raises."""
        producer = self._producer.get()
        if producer is None:
            return
        headers = [
            ("hotkeyd-reason", reason.encode()),
            ("hotkeyd-topic", tp.topic.encode()),
            ("hotkeyd-partition", str(tp.partition).encode()),
            ("hotkeyd-offset", str(getattr(rec, "offset", -1)).encode()),
        ]
        try:
            fut = producer.send(self.topic, key=rec.key, value=rec.value, headers=headers)
        except Exception as exc:
            self._failed(exc)
            return
        fut.add_callback(lambda _md: self._metrics.dead_letters.inc())
        fut.add_errback(self._failed)

    def close(self) -> None:
        """Deliver what is queued (up to 5 s) and close the producer."""
        self._producer.drop(5.0)

    def _failed(self, exc: BaseException) -> None:
        self._metrics.source_errors.labels(source="kafka", kind="dlq").inc()
        self._log.warning("dlq", "kafka: dead-letter forwarding to %s failed: %s", self.topic, exc)
