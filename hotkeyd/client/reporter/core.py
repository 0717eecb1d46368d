"""The reporter: a bounded in-memory count per key, flushed to Kafka in the background."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from hotkeyd.client.reporter.delivery import Message, never_appended_and_retriable
from hotkeyd.client.reporter.partition import partition_for
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.kafka import kafka_python
from hotkeyd.conn.producer import LazyProducer
from hotkeyd.errors import ClientError
from hotkeyd.protocol.formats import MAX_COUNT, encode_count_messages
from hotkeyd.protocol.keys import key_bytes

__all__ = ["Reporter", "as_bytes"]

logger = logging.getLogger("hotkeyd.client.reporter")


def as_bytes(key: Any) -> bytes | None:
    """The key's bytes (:func:`hotkeyd.protocol.keys.key_bytes`), or None for a non-key."""
    try:
        return key_bytes(key)
    except (TypeError, UnicodeEncodeError):
        return None


class Reporter:
    """Aggregates key accesses in memory and sends them to a Kafka topic.

    Args:
        bootstrap: Kafka bootstrap servers (``"host:9092"`` or a list).
        topic: topic the daemons consume with ``format=reporter``.
        flush_interval: seconds between flushes.
        max_keys: distinct keys buffered between flushes; more are dropped and counted.
        producer_kwargs: extra ``KafkaProducer`` keyword arguments (security settings,
            e.g. ``KafkaSettings.security_kwargs()``).
        clock: time source for flush scheduling.
        producer: an already built producer (tests); ``bootstrap`` is then unused.
        max_message_bytes: approximate upper bound of one message's value.
    """

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        *,
        flush_interval: float = 0.1,
        max_keys: int = 100_000,
        producer_kwargs: dict[str, Any] | None = None,
        clock: Clock = SystemClock(),  # noqa: B008 - stateless
        producer: Any = None,
        max_message_bytes: int = 256 * 1024,
    ) -> None:
        if flush_interval <= 0:
            raise ClientError(f"flush_interval must be > 0, not {flush_interval}")
        if max_keys < 1:
            raise ClientError(f"max_keys must be >= 1, not {max_keys}")
        self.topic = topic
        self.flush_interval = flush_interval
        self.max_keys = max_keys
        self.max_message_bytes = max_message_bytes
        self._bootstrap = bootstrap
        self._clock = clock
        kwargs = {
            "client_id": "hotkeyd-reporter",
            "linger_ms": 5,
            "max_block_ms": 2_000,
            "reconnect_backoff_max_ms": 5_000,
            **(producer_kwargs or {}),
        }
        self._producer = LazyProducer(
            bootstrap,
            kwargs,
            monotonic=clock.monotonic,
            retry=5.0,
            on_error=self._connect_failed,
            producer=producer,
        )
        # One lock for the buffer and every counter, so stats() is one consistent snapshot.
        self._lock = threading.Lock()
        self._buf: dict[Any, int] = {}
        self._dropped = 0
        self._recorded = 0
        self._flush_lock = threading.Lock()  # one flush at a time (thread vs explicit flush())
        self._in_flight: set[Message] = set()  # messages whose delivery result is unknown
        self._in_flight_accesses = 0
        self._closing = False  # failures from now on are dropped (counted), never re-queued
        self._own_producer = producer is None  # built here: replaced when it goes stale
        self._stale_producer = False
        self.messages_sent = 0
        self.bytes_sent = 0
        self.accesses_sent = 0
        self.accesses_requeued = 0
        self.send_errors = 0
        self._stop = threading.Event()
        self._closed = False
        self.unsent_at_close = 0  # accesses still buffered when close() gave up
        self._thread = threading.Thread(target=self._run, name="hotkeyd-reporter", daemon=True)
        self._thread.start()

    # -- hot path -----------------------------------------------------------------------
    def record(self, key: bytes | str, n: int = 1) -> None:
        """Count ``n`` accesses of ``key``. Never blocks on I/O; drops when the buffer is full.

        ``n`` must be an int >= 1; anything else is counted as one dropped access and logged.
        """
        if type(n) is not int or n < 1:
            self._reject(f"count {n!r} is not an int >= 1")
            return
        with self._lock:
            self._recorded += n
            buf = self._buf
            c = buf.get(key)
            if c is not None:
                buf[key] = c + n
            elif len(buf) < self.max_keys:
                buf[key] = n
            else:
                self._dropped += n

    def _reject(self, why: str) -> None:
        """One access that cannot be reported (bad count, not a key): recorded and dropped."""
        with self._lock:
            self._recorded += 1
            self._dropped += 1
        logger.warning("reporter: dropped an access: %s", why)

    # -- state ----------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        """Accesses dropped and counted: the buffer full, a key that is not bytes/str, a count
        over the cap, a message that failed for good or whose delivery is unknown, unsent at
        close."""
        return self._dropped

    def stats(self) -> dict[str, int]:
        """Counters for the app's own metrics: sent messages/bytes/accesses, drops, errors.

        Counts are in accesses except ``messages_sent``, ``send_errors`` (messages) and
        ``bytes_sent``. Between flushes ``accesses_recorded == accesses_sent + dropped +
        accesses_buffered`` (buffered: in the buffer or in a message awaiting its result).
        """
        with self._lock:
            buffered = sum(n for n in self._buf.values() if type(n) is int)
            return {
                "messages_sent": self.messages_sent,
                "bytes_sent": self.bytes_sent,
                "accesses_sent": self.accesses_sent,
                "send_errors": self.send_errors,
                "dropped": self._dropped,
                "buffered_keys": len(self._buf),
                "accesses_recorded": self._recorded,
                "accesses_requeued": self.accesses_requeued,
                "accesses_in_flight": self._in_flight_accesses,
                "accesses_buffered": buffered + self._in_flight_accesses,
            }

    # -- flushing ---------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Send everything buffered now and wait for delivery; False if Kafka is unreachable."""
        with self._flush_lock:
            sent = self._flush_once()
            producer = self._producer.current
        if producer is not None:
            try:
                producer.flush(timeout=timeout)
            except Exception as exc:
                logger.warning("reporter: flushing to Kafka failed: %s", exc)
                return False
        return sent

    def close(self, timeout: float = 10.0) -> int:
        """Flush what is buffered and stop; return the accesses that could not be sent.

        Idempotent; accesses recorded after close() are not sent. Counts still buffered
        when the last flush failed (Kafka unreachable), and messages whose delivery is still
        unknown when the producer is closed (they may or may not be on the topic; they are
        never sent again), are added to :attr:`dropped`, ``unsent_at_close`` and logged:
        never lost silently, never counted twice.
        """
        if self._closed:
            return self.unsent_at_close
        self._closed = True
        self._stop.set()
        self._thread.join(timeout)
        self.flush(timeout=timeout)
        with self._lock:
            self._closing = True
            left, self._buf = self._buf, {}
            unsent = sum(n for n in left.values() if type(n) is int and n > 0)
            self._dropped += unsent
        self._producer.drop(timeout)
        pending, unknown = self._drop_unsettled()
        if unsent or unknown:
            self.unsent_at_close = unsent + unknown
            logger.warning(
                "reporter: closed with %d accesses of %d keys unsent and %d accesses in %d "
                "messages of unknown delivery (Kafka %s), counted as dropped",
                unsent,
                len(left),
                unknown,
                pending,
                self._bootstrap,
            )
        return self.unsent_at_close

    def _drop_unsettled(self) -> tuple[int, int]:
        """Count messages a closed producer never resolved as dropped: (messages, accesses).

        Their outcome is unknown (the broker may have appended them): never sent again.
        """
        with self._lock:
            pending, self._in_flight = self._in_flight, set()
            unknown = 0
            for m in pending:
                m.settled = True
                unknown += m.total
            self._in_flight_accesses -= unknown
            self._dropped += unknown
        return len(pending), unknown

    def _recycle_producer(self) -> None:
        """Replace a producer whose delivery timed out (kafka-python 3.0's idempotent
        producer resets its producer id then and never asks for a new one: every later
        message would stall). Its unresolved messages are dropped and counted."""
        self._stale_producer = False
        if self._producer.current is None:
            return
        logger.warning("reporter: replacing the Kafka producer after a delivery timeout")
        self._producer.drop(0.0)
        self._drop_unsettled()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self) -> None:
        clock = self._clock
        next_at = clock.monotonic() + self.flush_interval
        # min(): a clock that does not move (ManualClock in tests) still flushes on time.
        while not self._stop.wait(max(0.0, min(self.flush_interval, next_at - clock.monotonic()))):
            next_at += self.flush_interval
            now = clock.monotonic()
            if next_at < now:  # fell behind (slow broker): do not try to catch up in a burst
                next_at = now + self.flush_interval
            try:
                with self._flush_lock:
                    self._flush_once()
            except Exception as exc:  # the thread must survive anything
                logger.exception("reporter: flush failed: %s", exc)

    def _connect_failed(self, exc: BaseException) -> None:
        logger.warning(
            "reporter: cannot connect to Kafka %s (%s); retrying in 5 s", self._bootstrap, exc
        )

    def _swap(self) -> dict[Any, int]:
        with self._lock:
            buf, self._buf = self._buf, {}
        return buf

    def _merge_back(self, items: Iterable[tuple[bytes, int]]) -> None:
        """Put unsent counts back (bounded by max_keys; the rest is dropped and counted)."""
        with self._lock:
            self._merge_back_locked(items)

    def _merge_back_locked(self, items: Iterable[tuple[bytes, int]]) -> None:
        buf = self._buf
        closing = self._closing  # close() took the buffer already: nothing would send these
        for k, n in items:
            c = buf.get(k)
            if closing:
                self._dropped += n
            elif c is not None:
                buf[k] = c + n
            elif len(buf) < self.max_keys:
                buf[k] = n
            else:
                self._dropped += n

    def _flush_once(self) -> bool:
        if self._stale_producer:
            self._recycle_producer()
        buf = self._swap()
        if not buf:
            return True
        merged = self._normalize(buf)
        producer = self._producer.get()
        if producer is None:
            self._merge_back(merged.items())
            return False
        try:
            parts = producer.partitions_for(self.topic)
        except Exception as exc:
            parts = None
            logger.warning("reporter: no metadata for topic %s: %s", self.topic, exc)
        if not parts:
            self._merge_back(merged.items())
            return False
        nparts = max(parts) + 1
        by_part: dict[int, list[tuple[bytes, int]]] = {}
        for k, n in merged.items():
            by_part.setdefault(partition_for(k, nparts), []).append((k, n))
        for p, items in by_part.items():
            for value, carried in encode_count_messages(items, max_bytes=self.max_message_bytes):
                self._send(producer, p, value, carried)
        return True

    def _normalize(self, buf: dict[Any, int]) -> dict[bytes, int]:
        """Merge str and bytes spellings of a key; drop (and count) non-key types and bad counts."""
        out: dict[bytes, int] = {}
        bad = 0
        for k, n in buf.items():  # record() took only ints >= 1
            kb = k if type(k) is bytes else as_bytes(k)
            if kb is None:
                bad += n
                continue
            out[kb] = out.get(kb, 0) + n
        for kb, n in out.items():
            if n > MAX_COUNT:  # the daemon rejects larger counts; keep the key, cap its count
                bad += n - MAX_COUNT
                out[kb] = MAX_COUNT
        if bad:
            with self._lock:
                self._dropped += bad
            logger.warning(
                "reporter: dropped %d accesses (key not bytes/str, bad count, or over the count cap)",
                bad,
            )
        return out

    def _send(
        self, producer: Any, partition: int, value: bytes, items: list[tuple[bytes, int]]
    ) -> None:
        msg = Message(items, len(value))
        with self._lock:
            self._in_flight.add(msg)
            self._in_flight_accesses += msg.total
        try:
            fut = producer.send(self.topic, value=value, partition=partition)
        except Exception as exc:  # raised before the record was queued: it never left
            self._failed(msg, exc, queued=False)
            return
        fut.add_callback(lambda _md: self._delivered(msg))
        fut.add_errback(lambda exc: self._failed(msg, exc, queued=True))

    def _settle_locked(self, msg: Message) -> bool:
        """Take ``msg`` out of flight; False if its result was already accounted for."""
        if msg.settled:
            return False
        msg.settled = True
        self._in_flight.discard(msg)
        self._in_flight_accesses -= msg.total
        return True

    def _delivered(self, msg: Message) -> None:
        with self._lock:
            if not self._settle_locked(msg):
                return
            self.messages_sent += 1
            self.bytes_sent += msg.size
            self.accesses_sent += msg.total

    def _failed(self, msg: Message, exc: BaseException, *, queued: bool) -> None:
        with self._lock:
            if not self._settle_locked(msg):
                return
            self.send_errors += 1
            requeue = not self._closing and never_appended_and_retriable(exc, queued)
            if requeue:
                self.accesses_requeued += msg.total
                self._merge_back_locked(msg.items)
            else:
                self._dropped += msg.total
                timed_out = isinstance(exc, kafka_python().errors.KafkaTimeoutError)
                if queued and timed_out and self._own_producer:
                    self._stale_producer = True  # replaced by the next flush
        logger.warning(
            "reporter: a message to %s (%d accesses of %d keys) failed: %s: %s; %s",
            self.topic,
            msg.total,
            len(msg.items),
            type(exc).__name__,
            exc,
            "re-queued for the next flush" if requeue else "dropped and counted",
        )
