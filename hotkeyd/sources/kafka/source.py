"""The Kafka source: a consumer-group member that turns records into Batches.

Why a thread: kafka-python's calls can block far longer than a tick (bootstrapping a
consumer against a broker that is down waits for seconds, a rebalance waits for the
group), and the detector's tick loop must never stall. A consumer thread owns the
``KafkaConsumer`` (which is not thread-safe) and everything that touches it: connecting
with backoff, polling, decoding, committing, rebalance callbacks, lag. It hands decoded
batches to ``next_batch`` through a small bounded queue, so a slow detector pushes back
on fetching instead of growing memory.

At-least-once: auto commit is off. ``next_batch`` remembers the offsets behind the
batches it handed out; ``commit()`` (called by the service once they are in the sketch)
marks them acknowledged and the consumer thread commits them on its next turn (within
~100 ms), and at once when partitions are revoked. Batches still queued for a revoked
partition are dropped: the partition's new owner reads them from the committed offset,
so no record is counted by two daemons.

Faults: a poll that raises (a batch whose codec cannot be decoded, a corrupt batch, a
fetcher in a bad state) is never retried on the same consumer -- kafka-python's fetcher can
be left spinning after one -- the consumer is closed and a fresh one resumes from the
committed offsets after a backoff. A watchdog reports the source unhealthy (``unhealthy``,
which /healthz turns into a 503) when a poll has not returned for ``stall_after`` seconds.
Lag is measured by :class:`~hotkeyd.sources.kafka.lag.LagProbe` on a thread of its own,
so a stuck consumer shows as growing lag rather than a frozen gauge. ``close`` waits at
most ``close_timeout`` seconds for the consumer thread, so SIGTERM finishes in time even
when the consumer is stuck.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from hotkeyd.backoff import Backoff
from hotkeyd.batch import Batch
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.kafka import KafkaSettings, check_reachable, kafka_python
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.formats import RecordDecoder, RecordLike
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sources.kafka.dlq import DeadLetters
from hotkeyd.sources.kafka.lag import LagProbe
from hotkeyd.sources.kafka.merge import TimeMerge
from hotkeyd.sources.kafka.pace import Pacer

__all__ = ["KafkaSource"]

logger = logging.getLogger(__name__)

_POLL_MS = 100
_LAG_EVERY = 1.0
_LOG_EVERY = 10.0
_MAX_BACKOFF = 30.0
_POLLED_WELL = 10.0  # s a consumer polled without failing: the next failure waits 0.25-0.5 s


def _offset_and_metadata(offset: int) -> Any:
    OffsetAndMetadata = kafka_python().structs.OffsetAndMetadata

    if len(OffsetAndMetadata._fields) >= 3:
        return OffsetAndMetadata(offset, "", -1)
    return OffsetAndMetadata(offset, "")  # kafka-python 2.0.x


class KafkaSource:
    """Key accesses from Kafka topics, as a member of a consumer group.

    Args:
        settings: connection, group, format and security (see :mod:`hotkeyd.conn.kafka`).
        metrics: where records, bad records, rebalances, lag and errors are counted.
        clock: time source for lag updates and log rate limiting.
        max_key_len: longest key accepted; longer ones are counted as ``oversized``.
        consumer_factory: ``f(**kwargs) -> KafkaConsumer``; kafka-python's by default.
        producer_factory: ``f(**kwargs) -> KafkaProducer`` for the dead-letter topic.
        max_queue: decoded poll results (per partition) buffered ahead of the detector.
        commit_interval: seconds between offset commits of acknowledged batches (a crash
            replays at most about this much; revocation and close commit at once).
        stall_after: seconds a poll may take before the source reports itself unhealthy.
        close_timeout: seconds ``close`` waits for the consumer thread (leaving the group,
            final commit); a stuck thread is abandoned after that (it is a daemon thread).
        lag_every: seconds between two lag measurements (0 disables the probe).
        max_lag: seconds a partition may lag before it seeks ahead (``--max-lag``; None:
            never). See :mod:`hotkeyd.sources.kafka.pace`.
    """

    name = "kafka"
    reports_idle = True

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        metrics: Metrics,
        clock: Clock = SystemClock(),  # noqa: B008 - stateless
        max_key_len: int = 1024,
        consumer_factory: Callable[..., Any] | None = None,
        producer_factory: Callable[..., Any] | None = None,
        max_queue: int = 64,
        commit_interval: float = 0.5,
        stall_after: float = 30.0,
        close_timeout: float = 5.0,
        lag_every: float = _LAG_EVERY,
        max_lag: float | None = None,
    ) -> None:
        self.settings = settings
        self._metrics = metrics
        self._clock = clock
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self._decoder = RecordDecoder(
            settings.format, max_key_len=max_key_len, source=self.name, scale=settings.scale
        )
        self._max_queue = max_queue
        self._commit_interval = commit_interval
        self._committed_at = 0.0
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[Any, list[Batch], int]] = collections.deque()
        self._handed: dict[Any, int] = {}  # tp -> next offset, handed to the service
        self._acked: dict[Any, int] = {}  # tp -> next offset, counted; to commit
        self._assigned: frozenset[Any] = frozenset()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._dlq = (
            DeadLetters(settings, metrics=metrics, clock=clock, producer_factory=producer_factory)
            if settings.dlq_topic
            else None
        )
        self._pacer = Pacer(self.name, metrics, max_lag=max_lag)
        self._merge = TimeMerge()
        self._held = 0  # records the time merge holds (read by idle_watermark)
        self._fetched: dict[Any, int] = {}
        self._highwater: dict[Any, int] = {}  # tp -> high watermark of the last fetch
        self._lag_at = 0.0
        self._log = RateLimitedLog(logger, _LOG_EVERY, clock.monotonic).log
        self._connected = False
        self._closed = False
        self._down_since: float | bool | None = None  # False: watchdog disabled
        self._down_logged = False
        self._stall_after = stall_after
        self._close_timeout = close_timeout
        self._poll_since: float | None = None  # monotonic start of the poll in progress
        self._poll_error: str | None = None  # the last poll failure, until a poll succeeds
        self._lag = (
            LagProbe(
                settings,
                metrics=metrics,
                assigned=lambda: self._assigned,
                positions=lambda: dict(self._fetched),
                highwater=lambda: dict(self._highwater),
                every=lag_every,
                consumer_factory=consumer_factory,
            )
            if lag_every > 0
            else None
        )

    # -- Source protocol --------------------------------------------------------------
    def start(self) -> None:
        """Start the consumer thread; returns at once even if the broker is down."""
        if self._thread is not None:
            return
        logger.info("starting %s", self.settings.describe())
        self._thread = threading.Thread(target=self._run, name="hotkeyd-kafka", daemon=True)
        self._thread.start()
        if self._lag is not None:
            self._lag.start()

    def next_batch(self, max_wait: float) -> list[Batch]:
        out: list[Batch] = []
        with self._cond:
            if not self._queue and max_wait > 0 and not self._closed:
                self._cond.wait(max_wait)
            while self._queue:
                tp, batches, next_offset = self._queue.popleft()
                out.extend(batches)
                if next_offset > self._handed.get(tp, -1):
                    self._handed[tp] = next_offset
            self._cond.notify_all()  # room in the queue again
        return out

    def commit(self) -> None:
        """Acknowledge everything handed out so far; the consumer thread commits it."""
        with self._cond:
            for tp, off in self._handed.items():
                if off > self._acked.get(tp, -1):
                    self._acked[tp] = off
            self._handed.clear()

    def idle_watermark(self) -> float | None:
        """Wall time up to which every record has been handed out, when caught up."""
        with self._cond:
            if self._queue or self._held:
                return None
        return self._pacer.idle_watermark()

    @property
    def exhausted(self) -> bool:
        return False

    def close(self) -> None:
        """Commit what was acknowledged, leave the group, stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        if self._lag is not None:
            self._lag.close()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self._close_timeout)
            if thread.is_alive():
                logger.warning(
                    "kafka consumer thread did not stop within %.1f s; abandoning it "
                    "(offsets not committed since the last commit are read again)",
                    self._close_timeout,
                )

    # -- introspection (tests, status pages) ----------------------------------------------
    def assignment(self) -> frozenset[tuple[str, int]]:
        """Partitions this member owns now, as ``(topic, partition)`` pairs."""
        return frozenset((tp.topic, tp.partition) for tp in self._assigned)

    @property
    def connected(self) -> bool:
        """True once a consumer has been created and subscribed."""
        return self._connected

    @property
    def unhealthy(self) -> str | None:
        """Why the source is stuck (a poll running for ``stall_after`` s), or None."""
        since = self._poll_since
        if since is not None:
            took = self._clock.monotonic() - since
            if took >= self._stall_after:
                return f"kafka poll has not returned for {took:.0f} s"
        return None

    @property
    def error(self) -> str | None:
        """The last poll failure while it repeats (the source is degraded, retrying)."""
        return self._poll_error

    # -- consumer thread ------------------------------------------------------------------
    def _run(self) -> None:
        backoff = Backoff(0.5, _MAX_BACKOFF)  # connecting
        # Polling: its own schedule, not reset by the reconnect that follows each failure
        # (a batch that fails fails every fresh consumer again, after a few empty polls
        # while it joins the group); reset once a consumer has polled well for a while.
        poll_backoff = Backoff(0.5, _MAX_BACKOFF)
        connected_at = 0.0
        try:
            while not self._stop.is_set():
                if self._consumer is None:
                    try:
                        self._consumer = self._connect()
                    except Exception as exc:
                        self._metrics.source_errors.labels(source=self.name, kind="connect").inc()
                        delay = backoff.next_delay()
                        self._log(
                            logging.WARNING,
                            "connect",
                            "kafka: cannot connect to %s (%s); retrying in %.1f s",
                            ",".join(self.settings.bootstrap),
                            exc,
                            delay,
                        )
                        self._stop.wait(delay)
                        continue
                    backoff.reset()
                    connected_at = self._clock.monotonic()
                    self._connected = True
                    logger.info(
                        "kafka: connected, subscribed to %s", ",".join(self.settings.topics)
                    )
                try:
                    self._step()
                    self._poll_error = None
                except Exception as exc:
                    # Never poll a consumer that raised again: kafka-python's fetcher can
                    # be left spinning at 100 % CPU (seen after UnsupportedCodecError). A
                    # fresh consumer resumes from the committed offsets.
                    self._poll_since = None
                    self._poll_error = f"poll failed: {type(exc).__name__}: {exc}"[:300]
                    self._metrics.source_errors.labels(source=self.name, kind="poll").inc()
                    if self._clock.monotonic() - connected_at >= _POLLED_WELL:
                        poll_backoff.reset()
                    wait = poll_backoff.next_delay()
                    self._log(
                        logging.WARNING,
                        "poll",
                        "kafka: poll failed (%s: %s); new consumer in %.1f s",
                        type(exc).__name__,
                        exc,
                        wait,
                    )
                    self._drop_consumer()
                    self._stop.wait(wait)
        finally:
            self._drop_consumer()
            if self._dlq is not None:
                self._dlq.close()

    def _connect(self) -> Any:
        KafkaConsumer = kafka_python().KafkaConsumer

        kwargs = self.settings.consumer_kwargs()
        factory: Callable[..., Any] = self._consumer_factory or KafkaConsumer
        known = getattr(KafkaConsumer, "DEFAULT_CONFIG", {})
        if factory is KafkaConsumer and "bootstrap_timeout_ms" in known:
            kwargs["bootstrap_timeout_ms"] = 5_000  # fail fast and retry with our own backoff
        if factory is KafkaConsumer and "allow_auto_create_topics" in known:
            kwargs["allow_auto_create_topics"] = False  # a reader must not create topics
        if factory is KafkaConsumer:
            # A KafkaConsumer whose constructor fails to bootstrap leaks its network thread
            # and sockets (kafka-python 3.0); do not build one while nothing answers.
            check_reachable(self.settings.bootstrap)
        consumer = factory(**kwargs)
        try:
            consumer.subscribe(list(self.settings.topics), listener=self._listener())
        except Exception:
            consumer.close()
            raise
        return consumer

    def _drop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._connected = False
        if consumer is None:
            return
        try:
            self._commit_acked(consumer, now=True)
        except Exception as exc:
            logger.warning("kafka: final commit failed: %s", exc)
        try:
            consumer.close(autocommit=False, timeout_ms=3_000)  # bounded: SIGTERM must finish
        except Exception as exc:
            logger.warning("kafka: closing the consumer failed: %s", exc)
        self._set_assigned(frozenset())

    def _step(self) -> None:
        consumer = self._consumer
        self._commit_acked(consumer)
        with self._cond:
            if len(self._queue) >= self._max_queue:
                # Backpressure: the detector is behind. Fetching resumes when it catches up;
                # kafka-python heartbeats from its own IO thread meanwhile.
                self._cond.wait(_POLL_MS / 1000)
                full = len(self._queue) >= self._max_queue
            else:
                full = False
        if not full:
            self._poll_since = self._clock.monotonic()
            started = self._clock.time()
            polled = consumer.poll(timeout_ms=_POLL_MS)
            self._poll_since = None
            self._pacer.polled(started, sum(map(len, polled.values())) if polled else 0)
            if polled:
                self._ingest(polled)
                newest = {tp: recs[-1].timestamp for tp, recs in polled.items() if recs}
                self._merge.drop(self._pacer.fast_forward(consumer, newest, self._clock.time()))
            self._release(consumer)
        now = self._clock.monotonic()
        if now - self._lag_at >= _LAG_EVERY:
            self._lag_at = now
            self._pacer.update_shed()
            self._watch_connection(consumer, now)
            self._check_positions(consumer)

    def _watch_connection(self, consumer: Any, now: float) -> None:
        """Log and count a lost broker connection once per outage.

        kafka-python reconnects by itself (with ``reconnect_backoff_ms`` growing up to
        ``reconnect_backoff_max_ms``) and its ``poll`` just returns nothing meanwhile, so
        without this an outage would be silent in our logs and metrics. Reads kafka-python
        client state that is not public API; if that changes, the check turns itself off.
        """
        if self._down_since is False:
            return
        try:
            client = consumer._client
            brokers = client.cluster.brokers()
            up = any(
                client.connected(getattr(b, "node_id", getattr(b, "nodeId", None))) for b in brokers
            )
        except Exception:
            self._down_since = False  # unknown client internals: disable the watchdog
            return
        if not up and brokers:
            if self._down_since is None:
                self._down_since = now
            elif now - self._down_since >= 2 * _LAG_EVERY and not self._down_logged:
                self._down_logged = True
                self._metrics.source_errors.labels(source=self.name, kind="disconnected").inc()
                logger.warning(
                    "kafka: no connection to any broker of %s; reconnecting with backoff",
                    ",".join(self.settings.bootstrap),
                )
        elif up and self._down_since is not None:
            if self._down_logged:
                logger.info("kafka: reconnected after %.1f s", now - self._down_since)
            self._down_since = None
            self._down_logged = False

    def _ingest(self, polled: dict[Any, list[Any]]) -> None:
        nrec = 0
        now = self._clock.monotonic()
        for tp, records in polled.items():
            if not records:
                continue
            nrec += len(records)
            self._merge.add(tp, records, now)
            self._fetched[tp] = records[-1].offset + 1
        self._metrics.records.labels(source=self.name).inc(nrec)

    def _release(self, consumer: Any) -> None:
        """Decode and queue what the time merge lets go (see :mod:`.merge`)."""

        def caught_up(tp: Any) -> bool:
            hw = consumer.highwater(tp)
            return hw is not None and self._fetched.get(tp, -1) >= hw

        # Batches of all partitions in timestamp order; a partition's offset advances with
        # its last batch only (-1: no advance), so at-least-once holds however they mix.
        entries: list[tuple[float, int, Any, list[Batch], int]] = []
        for tp, records in self._merge.release(self._assigned, caught_up, self._clock.monotonic()):
            batches, bad = self._decoder.decode(records)
            if bad:
                self._reject(tp, bad)
            last = records[-1].offset + 1
            if not batches:
                entries.append((float("inf"), len(entries), tp, [], last))
            for j, b in enumerate(batches):
                off = last if j == len(batches) - 1 else -1
                entries.append((b.ts or 0.0, len(entries), tp, [b], off))
        entries.sort(key=lambda e: (e[0], e[1]))
        items = [(tp, batches, off) for _, _, tp, batches, off in entries]
        self._held = len(self._merge)
        if items:
            with self._cond:
                self._queue.extend(items)
                self._cond.notify_all()

    def _commit_acked(self, consumer: Any, *, now: bool = False) -> None:
        """Commit acknowledged offsets: at most every ``commit_interval``, or ``now``.

        A commit is a synchronous round trip to the group coordinator; doing one per poll
        would halve throughput. Revocation and close commit at once.
        """
        t = self._clock.monotonic()
        if not now and t - self._committed_at < self._commit_interval:
            return
        with self._cond:
            if not self._acked:
                return
            acked, self._acked = self._acked, {}
        self._committed_at = t
        assigned = self._assigned
        offsets = {tp: _offset_and_metadata(off) for tp, off in acked.items() if tp in assigned}
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets)
        except Exception as exc:
            self._metrics.source_errors.labels(source=self.name, kind="commit").inc()
            self._log(
                logging.WARNING, "commit", "kafka: offset commit failed (%s); will retry", exc
            )
            with self._cond:  # retry later, unless something newer was acknowledged meanwhile
                for tp, off in acked.items():
                    if off > self._acked.get(tp, -1):
                        self._acked[tp] = off

    def _check_positions(self, consumer: Any) -> None:
        """Rewind partitions whose position is past the end of the log (lag: LagProbe)."""
        for tp in list(self._assigned):
            try:
                hw = consumer.highwater(tp)
                if hw is None:
                    continue
                self._highwater[tp] = hw
                pos = self._fetched.get(tp)
                if pos is None:
                    pos = consumer.position(tp)
                if pos is None:
                    continue
            except Exception:  # revoked meanwhile, or no position yet
                continue
            if hw < pos:
                self._rewind(consumer, tp, pos, hw)

    def _rewind(self, consumer: Any, tp: Any, pos: int, hw: int) -> None:
        """Our position is past the end of the log: the topic was recreated or truncated.

        A broker that lost its data (or a topic deleted and created again) restarts offsets
        at 0, while our position -- or the offset committed before the loss -- is far
        beyond; the consumer would wait there for records that never come. Everything in
        the new log is new to us, so read it from the start.
        """
        self._metrics.source_errors.labels(source=self.name, kind="offset_reset").inc()
        logger.warning(
            "kafka: position %d of %s[%d] is past the end of the log (%d): topic recreated or "
            "truncated? reading it from the start",
            pos,
            tp.topic,
            tp.partition,
            hw,
        )
        self._fetched.pop(tp, None)
        try:
            consumer.seek_to_beginning(tp)
        except Exception as exc:
            logger.warning("kafka: rewinding %s[%d] failed: %s", tp.topic, tp.partition, exc)

    # -- rebalance --------------------------------------------------------------------------
    def _set_assigned(self, assigned: frozenset[Any]) -> None:
        gone = self._assigned - assigned
        self._assigned = assigned
        self._merge.drop(gone)
        for tp in gone:
            self._fetched.pop(tp, None)
            self._highwater.pop(tp, None)
            with contextlib.suppress(KeyError):
                self._metrics.consumer_lag.remove(tp.topic, str(tp.partition))

    def _listener(self) -> Any:
        kafka_python()  # imported once, quietly; later imports are lookups
        from kafka import ConsumerRebalanceListener

        source = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                source._on_revoked(set(revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                source._on_assigned(set(assigned))

        return _Listener()

    def _on_revoked(self, revoked: set[Any]) -> None:
        if not revoked:
            return
        self._metrics.rebalances.labels(event="revoked").inc(len(revoked))
        logger.info("kafka: partitions revoked: %s", _fmt_tps(revoked))
        with self._cond:  # queued batches of revoked partitions belong to the next owner now
            self._queue = collections.deque(item for item in self._queue if item[0] not in revoked)
        if self._consumer is not None:
            try:
                self._commit_acked(self._consumer, now=True)
            except Exception as exc:
                logger.warning("kafka: commit on revocation failed: %s", exc)
        self._set_assigned(self._assigned - revoked)

    def _on_assigned(self, assigned: set[Any]) -> None:
        self._metrics.rebalances.labels(event="assigned").inc(len(assigned))
        logger.info("kafka: partitions assigned: %s", _fmt_tps(assigned) or "(none)")
        self._set_assigned(frozenset(assigned))

    # -- bad records --------------------------------------------------------------------------
    def _reject(self, tp: Any, bad: list[tuple[str, RecordLike]]) -> None:
        malformed = self._metrics.malformed
        for reason, _rec in bad:
            malformed.labels(source=self.name, reason=reason).inc()
        reason, rec = bad[0]
        self._log(
            logging.WARNING,
            "bad:" + reason,
            "kafka: bad record (%s) at %s[%d]@%s: %r",
            reason,
            tp.topic,
            tp.partition,
            getattr(rec, "offset", "?"),
            (rec.value or b"")[:80],
        )
        if self._dlq is not None:
            for reason, rec in bad:
                self._dlq.forward(tp, reason, rec)


def _fmt_tps(tps: set[Any]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(tps))
