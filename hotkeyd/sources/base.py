"""The contract between sources and the detector.

A source hands over :class:`Batch` objects and never blocks the tick loop:
``next_batch(max_wait)`` returns ``[]`` when nothing is ready within ``max_wait``
seconds. Sources that need blocking I/O (sockets, Kafka) do it in a thread of their
own, or with a poll timeout no longer than ``max_wait``.

Bad input is data, not a crash: a source counts each malformed record by reason in
``Metrics.malformed`` and logs a sample at a limited rate, then carries on.
"""

from __future__ import annotations

from typing import Protocol

from hotkeyd.batch import Batch
from hotkeyd.errors import HotkeydError

__all__ = ["Batch", "InMemorySource", "Source"]


class Source(Protocol):
    """A stream of key accesses.

    Lifecycle: ``start()`` once, then ``next_batch()`` repeatedly; after each batch the
    service calls ``commit()`` once the returned batches are in the sketch (Kafka
    commits offsets there: at-least-once). ``close()`` stops intake and releases
    resources; it must be safe to call twice.
    """

    name: str
    reports_idle: bool
    """Whether :meth:`idle_watermark` reports "caught up" (Kafka). The detector then moves
    the source's event time only with its data and those reports, so a paused consumer is
    not mistaken for a quiet one; other event-time sources follow the wall clock when
    quiet."""

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

    @property
    def error(self) -> HotkeydError | str | None:
        """The source's failure (an exception or one line), else None.

        While running it makes the daemon degraded; a finite source sets it before
        ``exhausted`` turns true when input was lost, and the daemon then exits 1.
        """
        ...

    @property
    def connected(self) -> bool:
        """False while the source cannot reach its server (the daemon is degraded)."""
        ...

    @property
    def unhealthy(self) -> str | None:
        """Why the source is stuck (restarting the daemon would help), else None."""
        ...

    def idle_watermark(self) -> float | None:
        """Event time up to which everything was handed out, while caught up; else None.

        Lets the detector close event-time sub-windows of a source with nothing to read.
        """
        ...

    def close(self) -> None:
        """Stop intake and release resources. Idempotent."""
        ...


class InMemorySource:
    """The health members of a source that lives in this process (synthetic, list-backed):
    it never fails, is always connected, never stalls, and has no event-time watermark."""

    @property
    def error(self) -> None:
        return None

    @property
    def connected(self) -> bool:
        return True

    @property
    def unhealthy(self) -> None:
        return None

    def idle_watermark(self) -> None:
        return None
