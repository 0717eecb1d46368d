"""Consumer lag, measured on a thread and a connection of its own.

The consumer thread cannot measure its own lag: when it is stuck (a poll that never
returns, a fetcher that spins) a gauge it updates freezes at its last value, typically 0,
exactly when lag matters. This probe asks the brokers for the log-end offsets of the
partitions the source owns with a separate, group-less client, and subtracts the position
the source last reached (or, before it read anything, the group's committed offset). A
stuck consumer therefore shows as growing lag.

The probe also notices brokers that stop answering while their sockets stay open (a
frozen or overloaded broker, a half-open path), which the consumer's connection state
does not show: when no measurement succeeds for ``outage_after`` seconds it logs one
warning and counts ``hotkeyd_source_errors_total{kind="unresponsive"}``, and logs again
when the brokers answer.

The log end is the larger of the brokers' answer and the high watermark the consumer saw
in its last fetch: some Kafka-protocol brokers (Tansu 0.x) answer ListOffsets(latest) with
the first offset of the last batch plus one, which undercounts by the batch's size.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hotkeyd.conn.kafka import KafkaSettings, check_reachable, kafka_python
from hotkeyd.metrics import Metrics

__all__ = ["LagProbe"]

logger = logging.getLogger(__name__)


class LagProbe:
    """Every ``every`` seconds, set ``hotkeyd_kafka_consumer_lag_messages`` per partition.

    Args:
        settings: where the brokers are, and the group whose committed offsets to read.
        metrics: holds the lag gauge.
        assigned: the partitions (``TopicPartition``) the source owns now.
        positions: ``{tp: next offset}`` the source has fetched so far.
        highwater: ``{tp: high watermark}`` from the consumer's last fetches.
        every: seconds between two measurements.
        outage_after: seconds without a successful measurement reported as an outage.
        consumer_factory: ``f(**kwargs)`` building the probe's client; kafka-python's by default.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        metrics: Metrics,
        assigned: Callable[[], frozenset[Any]],
        positions: Callable[[], Mapping[Any, int]],
        highwater: Callable[[], Mapping[Any, int]] = dict,
        every: float = 1.0,
        consumer_factory: Callable[..., Any] | None = None,
        outage_after: float = 3.0,
    ) -> None:
        self._settings = settings
        self._gauge = metrics.consumer_lag
        self._errors = metrics.source_errors
        self._outage_after = outage_after
        self._failing_since: float | None = None
        self._reported = False
        self._assigned = assigned
        self._positions = positions
        self._highwater = highwater
        self._every = every
        self._factory = consumer_factory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._shown: set[Any] = set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hotkeyd-kafka-lag", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every):
                started = time.monotonic()
                try:
                    self.measure()
                except Exception as exc:  # broker away: the next turn tries again
                    # (on the same client: kafka-python reconnects it; a new one would
                    # block in its bootstrap while the broker does not answer)
                    logger.debug("kafka lag probe: %s", exc)
                    self._failed(exc, started)
                else:
                    self._answered()
        finally:
            self._drop_client()

    def measure(self) -> None:
        """One measurement (the thread calls this; tests may too)."""
        owned = self._assigned()
        for tp in self._shown - owned:
            with contextlib.suppress(KeyError):
                self._gauge.remove(tp.topic, str(tp.partition))
        self._shown &= owned
        if not owned:
            return
        before = dict(self._positions())  # read before the log ends: lag is never negative
        client = self._connect()
        ends = client.end_offsets(list(owned), timeout_ms=2_000)
        seen = dict(self._highwater())
        missing = [tp for tp in owned if tp not in before]
        committed: dict[Any, int | None] = {}
        for tp in missing:
            committed[tp] = client.committed(tp, timeout_ms=2_000)
        for tp in owned:
            pos = before.get(tp, committed.get(tp))
            if pos is None or (ends.get(tp) is None and tp not in seen):
                continue
            end = max(ends.get(tp) or 0, seen.get(tp, 0))
            self._gauge.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, end - pos))
            self._shown.add(tp)

    def _failed(self, exc: Exception, started: float) -> None:
        """A measurement begun at ``started`` failed: the brokers have not answered since."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = started
        if not self._reported and now - self._failing_since >= self._outage_after:
            self._reported = True
            self._errors.labels(source="kafka", kind="unresponsive").inc()
            logger.warning(
                "kafka: no answer from the brokers of %s for %.0f s (down, frozen or "
                "unreachable: %s); lag unknown",
                ",".join(self._settings.bootstrap),
                now - self._failing_since,
                exc,
            )

    def _answered(self) -> None:
        if self._reported and self._failing_since is not None:
            logger.info(
                "kafka: brokers answer again after %.1f s", time.monotonic() - self._failing_since
            )
        self._failing_since = None
        self._reported = False

    def _connect(self) -> Any:
        if self._client is None:
            KafkaConsumer = kafka_python().KafkaConsumer
            factory: Callable[..., Any] = self._factory or KafkaConsumer
            kw = self._settings.consumer_kwargs()
            kw["client_id"] = f"{self._settings.client_id}-lag"
            if factory is KafkaConsumer:
                check_reachable(self._settings.bootstrap)  # see KafkaSource._connect
                if "bootstrap_timeout_ms" in getattr(KafkaConsumer, "DEFAULT_CONFIG", {}):
                    kw["bootstrap_timeout_ms"] = 5_000
            self._client = factory(**kw)  # never subscribes: reads offsets, joins no group
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(autocommit=False)
