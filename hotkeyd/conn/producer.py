"""The one lazy Kafka producer: made on first use, retried after a pause, closed for sure.

The dead-letter forwarder (daemon side) and the reporter SDK (app side) both send from a
background loop that must never stall on Kafka, so both want the same thing: no producer
until one is needed; a failed attempt retried only after ``retry`` seconds, not on every
call; kafka-python's constructor not even tried while no bootstrap server answers (a
constructor that fails to bootstrap leaks sockets); and a close that stops the sender
thread even when pending messages would not complete in time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from hotkeyd.conn.kafka import check_reachable, kafka_python

__all__ = ["LazyProducer", "close_producer"]

logger = logging.getLogger(__name__)


class LazyProducer:
    """A ``KafkaProducer`` built on first :meth:`get`, and again after :meth:`drop`.

    Args:
        bootstrap: bootstrap servers (``"h1:9092,h2:9092"`` or a list).
        kwargs: the producer's keyword arguments (``bootstrap_servers`` is added).
        monotonic: the clock of the retry pause.
        retry: seconds to wait after a failed attempt before the next one.
        factory: ``f(**kwargs) -> producer``; kafka-python's ``KafkaProducer`` by default
            (only then is reachability checked first).
        on_error: called with the exception of a failed attempt (count it, log it).
        producer: an already built producer to hand out first (tests).
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        kwargs: dict[str, Any],
        *,
        monotonic: Callable[[], float],
        retry: float = 5.0,
        factory: Callable[..., Any] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        producer: Any = None,
    ) -> None:
        parts = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.bootstrap = [s.strip() for b in parts for s in b.split(",") if s.strip()]
        self.kwargs = dict(kwargs)
        self.retry = retry
        self._monotonic = monotonic
        self._factory = factory
        self._on_error = on_error
        self._producer = producer
        self._retry_at = 0.0

    @property
    def current(self) -> Any:
        """The producer if one is built (never builds one)."""
        return self._producer

    def get(self) -> Any:
        """The producer, built now if needed; None while Kafka is unreachable (retried
        after ``retry`` seconds, not sooner)."""
        if self._producer is not None:
            return self._producer
        now = self._monotonic()
        if now < self._retry_at:
            return None
        kafka_producer = kafka_python().KafkaProducer
        factory = self._factory or kafka_producer
        kwargs = {"bootstrap_servers": self.bootstrap, **self.kwargs}
        if "bootstrap_timeout_ms" in getattr(factory, "DEFAULT_CONFIG", {}):
            kwargs.setdefault("bootstrap_timeout_ms", 5_000)  # fail fast; we retry ourselves
        try:
            if factory is kafka_producer:
                check_reachable(self.bootstrap)
            self._producer = factory(**kwargs)
        except Exception as exc:
            self._retry_at = now + self.retry
            if self._on_error is not None:
                self._on_error(exc)
            return None
        return self._producer

    def drop(self, timeout: float) -> Any:
        """Close the producer (if any; see :func:`close_producer`); the next :meth:`get`
        builds a new one. Returns the producer that was closed, or None."""
        producer, self._producer = self._producer, None
        if producer is not None:
            close_producer(producer, timeout)
        return producer


def close_producer(producer: Any, timeout: float) -> None:
    """Close a kafka-python producer, stopping its sender even when pending messages would
    not complete in ``timeout`` (its ``close()`` then raises and leaves the sender running;
    stopping it fails those messages)."""
    try:
        producer.close(timeout=timeout)
        return
    except Exception as exc:
        logger.warning("kafka: closing the producer failed: %s", exc)
    sender = getattr(producer, "_sender", None)
    if sender is None:
        return
    sender.force_close()
    sender.join(5.0)
    try:
        producer.close(timeout=0)
    except Exception as exc:
        logger.warning("kafka: force-closing the producer failed: %s", exc)
