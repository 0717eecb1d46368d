"""One unit of work handed from a source to the detector.

It lives at the package root, beside the wire contract, because both halves of the
pipeline use it (the sources build batches, the detector rates them) and neither
should import the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Batch"]


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
