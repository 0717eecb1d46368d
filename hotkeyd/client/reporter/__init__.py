"""Reporter SDK: applications count their own key accesses and ship aggregates to Kafka.

Why pre-aggregate: a hot key is, by definition, accessed very often, so sending one Kafka
record per access would cost the app (and the broker) far more than the detection is
worth. ``Reporter.record()`` is a dict increment under a lock (its cost is measured by
``benchmarks/bench_kafka.py``, results in docs/kafka.md); a background thread swaps the
dict every ``flush_interval`` and sends one compact
message per target partition: ``key<TAB>count`` lines (the daemon's C fast path), or a
JSON batch object for keys that cannot travel as lines (see :mod:`hotkeyd.protocol.formats`).
Point the daemon at the topic with ``format=reporter`` (the default).

Partitioning: each key goes to partition ``murmur3_32(key, seed=0) mod partitions`` (set
explicitly on each message), so all accesses of one key -- from every app instance --
land on one partition and are counted by exactly one daemon of the consumer group.

Bounded memory: at most ``max_keys`` distinct keys are buffered between flushes; accesses
of further new keys are dropped and counted in ``dropped`` (the app is never blocked).
While Kafka is unreachable, unsent counts are merged back into the buffer under the same
bound.

Nothing is lost silently, nothing is counted twice: each message keeps the counts it
carries until its delivery result is known. Delivered: they are ``accesses_sent``. A
failure that certainly left nothing on the broker and that a retry can fix (no metadata,
the producer's buffer full, a retriable broker error): only that message's counts are
merged back for the next flush (``accesses_requeued``; beyond ``max_keys`` dropped and
counted). A failure a retry cannot fix (a record over ``max_request_size``, not
authorized) or whose outcome is unknown (the delivery timed out, the connection broke
after the request went out, still pending at close): dropped and counted, never re-sent
(at most once). ``stats()``: ``accesses_recorded = accesses_sent + dropped +
accesses_buffered``.

::

    reporter = Reporter("kafka:9092", "hotkeyd-accesses")
    reporter.record(b"user:42")          # or a str
    ...
    reporter.close()                     # flushes

Modules: :mod:`.core` (the buffer, the flush loop, close), :mod:`.delivery` (what a
message's delivery result means for its counts), :mod:`.partition` (which partition a
key goes to), :mod:`.instrument` (recording a redis-py client's keys). The producer is
:class:`hotkeyd.conn.producer.LazyProducer`, shared with the daemon's dead-letter topic.
"""

from __future__ import annotations

from hotkeyd.client.reporter.core import Reporter
from hotkeyd.client.reporter.instrument import command_keys, instrument
from hotkeyd.client.reporter.partition import partition_for

__all__ = ["Reporter", "command_keys", "instrument", "partition_for"]
