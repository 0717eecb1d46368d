"""A Kafka time range as event-time batches, read without joining a group or committing.

The consumer is assigned every partition of the topics (no group: offsets are never
committed, and the daemons' groups are not disturbed). Each partition starts at the
offset of ``start`` (``offsets_for_times``) or ``from_offset``, or at its beginning, and
stops at ``end`` (a record timestamp), at ``to_offset``, or at the end offset it had when
the replay began. Partitions are merged by timestamp: records are handed on only up to
the oldest timestamp every unfinished partition has reached, so a partition read ahead of
the others never makes their records look late.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator
from typing import Any

from hotkeyd.batch import Batch
from hotkeyd.conn.kafka import KafkaSettings, check_reachable, kafka_python
from hotkeyd.errors import SourceError
from hotkeyd.protocol.formats import RecordDecoder

__all__ = ["read_kafka_range"]

logger = logging.getLogger(__name__)

_POLL_MS = 200
_IDLE_TIMEOUT = 10.0  # no record at all for this long while partitions are unfinished: give up


def read_kafka_range(
    settings: KafkaSettings,
    *,
    start: float | None = None,
    end: float | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    stats: dict[str, int] | None = None,
    max_key_len: int = 1024,
) -> Iterator[Batch]:
    """Batches of the records in the range, in timestamp order across partitions.

    ``stats`` (when given) gets ``records`` and ``bad`` (rejected records) counts.
    """
    kp = kafka_python()
    check_reachable(settings.bootstrap)
    kw = settings.consumer_kwargs()
    kw.update(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    for k in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"):
        kw.pop(k, None)
    consumer = kp.KafkaConsumer(**kw)
    counts = stats if stats is not None else {}
    counts.setdefault("records", 0)
    counts.setdefault("bad", 0)
    decoder = RecordDecoder(settings.format, max_key_len=max_key_len, source="replay")
    try:
        tps = _partitions(consumer, kp, settings.topics)
        consumer.assign(tps)
        stop = _stops(consumer, tps, end_offset=to_offset)
        live = _seek(consumer, tps, stop, start=start, from_offset=from_offset)
        buffers: dict[Any, collections.deque[Any]] = {tp: collections.deque() for tp in live}
        newest: dict[Any, int] = {}
        idle_since = time.monotonic()
        end_ms = None if end is None else int(end * 1000)
        while live:
            polled = consumer.poll(timeout_ms=_POLL_MS)
            if not polled:
                if time.monotonic() - idle_since > _IDLE_TIMEOUT:
                    raise SourceError(
                        f"kafka replay: no records for {_IDLE_TIMEOUT:g}s from "
                        f"{', '.join(f'{tp.topic}[{tp.partition}]' for tp in sorted(live))}"
                    )
                continue
            idle_since = time.monotonic()
            for tp, records in polled.items():
                if tp not in live:
                    continue
                for rec in records:
                    if rec.offset >= stop[tp] or (end_ms is not None and rec.timestamp >= end_ms):
                        live.discard(tp)
                        consumer.pause(tp)
                        break
                    buffers[tp].append(rec)
                    newest[tp] = rec.timestamp
                else:
                    if consumer.position(tp) >= stop[tp]:
                        live.discard(tp)
                        consumer.pause(tp)
            # Hand on what every unfinished partition has passed.
            if live and any(tp not in newest for tp in live):
                continue
            safe = min((newest[tp] for tp in live), default=None)
            ready = []
            for _tp, buf in buffers.items():
                while buf and (safe is None or buf[0].timestamp <= safe):
                    ready.append(buf.popleft())
            if ready:
                yield from _decode(decoder, ready, counts)
        rest = [rec for buf in buffers.values() for rec in buf]
        if rest:
            yield from _decode(decoder, rest, counts)
    finally:
        consumer.close()


def _decode(decoder: RecordDecoder, records: list[Any], counts: dict[str, int]) -> list[Batch]:
    records.sort(key=lambda r: r.timestamp)
    batches, bad = decoder.decode(records)
    counts["records"] += len(records)
    counts["bad"] += len(bad)
    return batches


def _partitions(consumer: Any, kp: Any, topics: tuple[str, ...]) -> list[Any]:
    tps = []
    for topic in topics:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise SourceError(f"kafka replay: topic {topic!r} does not exist or has no partitions")
        tps += [kp.TopicPartition(topic, p) for p in sorted(parts)]
    return tps


def _stops(consumer: Any, tps: list[Any], *, end_offset: int | None) -> dict[Any, int]:
    ends = consumer.end_offsets(tps)
    if end_offset is None:
        return {tp: int(ends[tp]) for tp in tps}
    return {tp: min(int(ends[tp]), end_offset) for tp in tps}


def _seek(
    consumer: Any,
    tps: list[Any],
    stop: dict[Any, int],
    *,
    start: float | None,
    from_offset: int | None,
) -> set[Any]:
    """Position every partition; returns those with records to read."""
    live = set()
    firsts = consumer.beginning_offsets(tps)
    found = consumer.offsets_for_times({tp: int(start * 1000) for tp in tps}) if start else {}
    for tp in tps:
        if start is not None:
            hit = found.get(tp)
            pos = stop[tp] if hit is None else int(hit.offset)
        else:
            pos = int(firsts[tp])
        if from_offset is not None:
            pos = max(pos, from_offset)
        if pos < stop[tp]:
            consumer.seek(tp, pos)
            live.add(tp)
        else:
            consumer.pause(tp)
    return live
