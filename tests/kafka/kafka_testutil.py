"""Helpers for the Kafka tests: topics, settings with fast group timeouts, batch counting.

This directory has no ``__init__.py`` on purpose: as a package it would be importable as
``kafka`` and shadow kafka-python. Test module names are therefore unique (test_kafka_*).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from hotkeyd.batch import Batch
from hotkeyd.conn.kafka import KafkaSettings
from hotkeyd.sources.kafka.source import KafkaSource

FAST_GROUP = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    "max_poll_interval_ms": 20000,
}


def create_topic(bootstrap: str, name: str, partitions: int = 4) -> None:
    """Create ``name`` (tolerating that it exists, e.g. auto-created after a broker restart)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def settings(bootstrap: str, topic: str, *, group: str, **kw: object) -> KafkaSettings:
    opts: dict[str, object] = {"start": "earliest", **FAST_GROUP}
    opts.update(kw)
    return KafkaSettings(bootstrap=(bootstrap,), topics=(topic,), group=group, **opts)  # type: ignore[arg-type]


def producer(bootstrap: str, **kw: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **kw)


def count_batches(
    batches: Iterable[Batch], into: collections.Counter[bytes] | None = None
) -> collections.Counter[bytes]:
    """Exact key counts carried by batches (the test's own parser of the lines formats)."""
    out: collections.Counter[bytes] = collections.Counter() if into is None else into
    for b in batches:
        if b.keys is not None:
            counts = b.counts if b.counts is not None else [1] * len(b.keys)
            for k, n in zip(b.keys, counts, strict=True):
                out[bytes(k)] += int(n)
        else:
            assert b.lines is not None
            for line in bytes(b.lines).split(b"\n"):
                line = line.rstrip(b"\r")
                if not line:
                    continue
                if b.counted:
                    k, _, n = line.rpartition(b"\t")
                    out[k] += int(n)
                else:
                    out[line] += 1
    return out


def drain(
    sources: Iterable[KafkaSource],
    until: Callable[[], bool],
    *,
    timeout: float = 30.0,
    counters: dict[int, collections.Counter[bytes]] | None = None,
    batches_out: list[Batch] | None = None,
) -> bool:
    """Poll every source (and commit, as the service does) until ``until()`` or timeout."""
    srcs = list(sources)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, s in enumerate(srcs):
            got = s.next_batch(0.05)
            if got:
                if counters is not None:
                    count_batches(got, counters.setdefault(i, collections.Counter()))
                if batches_out is not None:
                    batches_out.extend(got)
                s.commit()
        if until():
            return True
    return until()


def wait_assigned(
    sources: Iterable[KafkaSource], partitions: int, *, timeout: float = 30.0
) -> bool:
    """Poll until the sources together own ``partitions`` partitions, each exactly once."""
    srcs = list(sources)

    def ok() -> bool:
        owned = [tp for s in srcs for tp in s.assignment()]
        return (
            len(owned) == partitions
            and len(set(owned)) == partitions
            and all(s.assignment() for s in srcs)
        )

    return drain(srcs, ok, timeout=timeout)


def read_all(bootstrap: str, topic: str, expected: int, *, timeout: float = 20.0) -> list[object]:
    """Every record of ``topic`` (no group), until ``expected`` records or timeout."""
    c = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=500
    )
    out: list[object] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(recs)
    finally:
        c.close()
    return out
