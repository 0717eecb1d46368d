"""Putting a batch's keys into a sketch: fast path, validation, and counting bad input.

The fast path is one sketch call per batch. Everything here is about not losing a
whole batch to one bad entry: oversized keys are filtered out first (a cheap
``max(map(len, ...))`` check decides whether that is needed), and a batch the sketch
rejects (a negative count) is retried key by key so the good entries still count and
the bad ones are counted as malformed. Nothing here is per-event logging: warnings go
through a rate-limited log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hotkeyd.detector.keys import encode_keys
from hotkeyd.errors import SketchError
from hotkeyd.protocol.lines import parse_counted
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sketch import SketchLike

__all__ = ["Intake", "count_lines", "count_nonempty_lines"]

Counts = tuple[int, int, int]  # (events, oversized, malformed)


class Intake:
    """Adds key lists to sketches for one detector.

    Args:
        max_key_len: longest identity (key plus db tag) accepted.
        log: rate-limited log for bad batches.
    """

    def __init__(self, max_key_len: int, log: RateLimitedLog) -> None:
        self.max_key_len = max_key_len
        self._log = log

    def add_keys(
        self,
        sketch: SketchLike | None,
        keys: Sequence[bytes],
        counts: Any,
        db: int,
        source: str,
    ) -> Counts:
        """Add ``keys`` (with ``counts``) of database ``db``; only count them when no sketch."""
        if len(keys) == 0:
            return 0, 0, 0
        if counts is not None and len(counts) != len(keys):
            self._log.warning(
                f"counts:{source}",
                "source %s: %d keys but %d counts; batch dropped",
                source,
                len(keys),
                len(counts),
            )
            return 0, 0, len(keys)
        idents = encode_keys(keys, db)
        limit = self.max_key_len
        oversized = 0
        if max(map(len, idents)) > limit:
            keep = [i for i, k in enumerate(idents) if len(k) <= limit]
            oversized = len(idents) - len(keep)
            idents = [idents[i] for i in keep]
            counts = None if counts is None else [counts[i] for i in keep]
            if not idents:
                return 0, oversized, 0
        try:
            events = len(idents) if counts is None else int(sum(counts))
        except (TypeError, ValueError) as exc:  # a count that is not a number
            if sketch is None:
                return 0, oversized, len(idents)
            return self._one_by_one(sketch, idents, counts, oversized, source, exc)
        if sketch is None:
            return events, oversized, 0
        try:
            sketch.update_many(idents, counts)
        except (SketchError, ValueError, TypeError) as exc:
            return self._one_by_one(sketch, idents, counts, oversized, source, exc)
        return events, oversized, 0

    def _one_by_one(
        self,
        sketch: SketchLike,
        idents: Sequence[bytes],
        counts: Any,
        oversized: int,
        source: str,
        exc: Exception,
    ) -> Counts:
        """Slow path after a rejected batch: keep the good entries, count the bad ones."""
        self._log.warning(
            f"keys:{source}",
            "source %s: batch rejected by the sketch (%s); adding keys one by one",
            source,
            exc,
        )
        events = malformed = 0
        for i, ident in enumerate(idents):
            c = 1 if counts is None else counts[i]
            try:
                sketch.update_many([ident], [c])
            except (SketchError, ValueError, TypeError):
                malformed += 1
                continue
            events += int(c)
        return events, oversized, malformed


def count_lines(buf: bytes | bytearray | memoryview, counted: bool) -> Counts:
    """Count the events of a line buffer without a sketch (late batches: a rare path).

    Counted buffers are parsed with the one grammar (:func:`hotkeyd.protocol.lines.parse_counted`,
    as the C fast path); lines lacking a valid ``<TAB>count`` are malformed.
    """
    if not counted:
        return count_nonempty_lines(buf), 0, 0
    data = bytes(buf)
    events = malformed = 0
    for line in data.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line:
            continue
        parsed = parse_counted(line)
        if parsed is None:
            malformed += 1
        else:
            events += parsed[1]
    return events, 0, malformed


def count_nonempty_lines(buf: bytes | bytearray | memoryview) -> int:
    """Lines with content (a ``\\r`` alone does not count)."""
    return sum(1 for line in bytes(buf).split(b"\n") if line.strip(b"\r"))
