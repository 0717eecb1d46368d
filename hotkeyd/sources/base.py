"""The contract between sources and the detector.

A source hands over :class:`Batch` objects and never blocks the tick loop:
``next_batch(max_wait)`` returns ``[]`` when nothing is ready within ``max_wait``
seconds. Sources that need blocking I/O (sockets, Kafka) do it in a thread of their
own, or with a poll timeout no longer than ``max_wait``.

Bad input is data, not a crash: a source counts each malformed record by reason in
``Metrics.malformed`` and logs a sample at a limited rate, then carries on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Batch", "Source"]


@dataclass(slots=True)
class Batch:
    """A group of key accesses handed from a source to the detector.

    Exactly one of ``lines`` or ``keys`` is set.

    Attributes:
        lines: newline-separated keys (``\\r\\n`` accepted); with ``counted`` each
            line is ``key<TAB>count``. Fed to the sketch's C fast path.
        counted: whether ``lines`` carry ``<TAB>count`` suffixes.
        keys: individual keys (bytes).
        counts: per-key counts for ``keys`` (same length), or None for all 1.
        ts: event time of the batch (Unix seconds), or None for "now". The detector's
            event-time policy uses it so that a backlog does not look like a burst.
        scale: multiply counts by this when computing rates (MONITOR duty cycling
            listens part of the time and scales back up).
        writes: for sources that can tell (MONITOR), the keys in this batch that were
            written, with ``write_counts``; all other accesses count as reads.
        db: Redis logical database the keys belong to (MONITOR); 0 otherwise.
        source: label of the source, for metrics.
    """

    lines: bytes | bytearray | memoryview | None = None
    counted: bool = False
    keys: Sequence[bytes] | None = None
    counts: Sequence[int] | Any | None = None
    ts: float | None = None
    scale: float = 1.0
    writes: Sequence[bytes] | None = None
    write_counts: Sequence[int] | None = None
    db: int = 0
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class Source(Protocol):
    """A stream of key accesses.

    Lifecycle: ``start()`` once, then ``next_batch()`` repeatedly; after each batch the
    service calls ``commit()`` once the returned batches are in the sketch (Kafka
    commits offsets there: at-least-once). ``close()`` stops intake and releases
    resources; it must be safe to call twice.
    """

    name: str

    def start(self) -> None:
        """Open connections / threads. May raise SourceError with a clear message."""
        ...

    def next_batch(self, max_wait: float) -> list[Batch]:
        """Return ready batches, waiting at most ``max_wait`` seconds; ``[]`` if none."""
        ...

    def commit(self) -> None:
        """The batches returned so far are counted; acknowledge them upstream."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once a finite source (a file without --follow) has nothing more."""
        ...

    def close(self) -> None:
        """Stop intake and release resources. Idempotent."""
        ...
