"""Event time of the Kafka source: "caught up" hints, and fast-forward past ``--max-lag``.

Two things only the consumer thread can know, kept here so the source stays about polling:

- **Caught up.** Polls that keep coming back empty mean nothing is waiting in any assigned
  partition. After a streak of them (at least ``streak`` seconds, with no gap between
  two polls longer than ``gap``: a process that was paused, e.g. SIGSTOP or a long GC, is
  not caught up just because its first poll after resuming returned early), the source
  reports an *idle watermark*: no record older than the start of the last empty poll is
  still to come. The detector then moves the source's event time on (hot keys of a quiet
  topic cool down); without the hint it waits for data, so a paused consumer's backlog is
  rated in its own event time instead of being taken for late.
- **Fast-forward.** A partition whose newest record is older than ``max_lag`` seeks ahead
  to ``now - max_lag / 2`` (``offsets_for_times``); the records skipped are counted
  (``hotkeyd_source_skipped_events_total{reason="max_lag_records"}``: records, not
  accesses, since they are never decoded). Under sustained overload this reads the topic
  in slices -- time-slice sampling: rates inside a slice are exact in event time (a rate
  is per second of event time, so a skipped slice removes events and time alike and
  nothing needs scaling), and the shed fraction (records skipped / records produced) is
  ``hotkeyd_source_shed_fraction{source}``. The price is that a key hot only inside a
  skipped slice (at most ``max_lag / 2`` long) is not seen.
"""

from __future__ import annotations

import logging
from typing import Any

from hotkeyd.metrics import Metrics

__all__ = ["Pacer"]

logger = logging.getLogger(__name__)

_EMA = 0.3  # weight of the newest second in the shed-fraction average


class Pacer:
    """Idle watermark and max-lag fast-forward for one Kafka source.

    Args:
        source: label for metrics.
        metrics: where skipped records and the shed fraction go.
        max_lag: seconds a partition may lag before it seeks ahead (None: never).
        streak: seconds of empty polls before the source counts as caught up.
        gap: longest pause between two polls inside one streak.
    """

    def __init__(
        self,
        source: str,
        metrics: Metrics,
        *,
        max_lag: float | None,
        streak: float = 0.3,
        gap: float = 0.5,
    ) -> None:
        self.source = source
        self._metrics = metrics
        self.max_lag = max_lag
        self.streak = streak
        self.gap = gap
        self._streak_from: float | None = None
        self._last_empty: float | None = None
        self._read = 0
        self._skipped = 0
        self._shed = 0.0

    # -- idle ---------------------------------------------------------------------------
    def polled(self, started: float, records: int) -> None:
        """A poll that began at wall time ``started`` returned ``records`` records."""
        if records:
            self._read += records
            self._streak_from = self._last_empty = None
            return
        if self._last_empty is None or started - self._last_empty > self.gap:
            self._streak_from = started  # a new streak (or the first poll after a pause)
        self._last_empty = started

    def idle_watermark(self) -> float | None:
        """Event time up to which the source has read everything, when it is caught up."""
        first, last = self._streak_from, self._last_empty
        if first is None or last is None or last - first < self.streak:
            return None
        return last

    # -- fast-forward ---------------------------------------------------------------------
    def fast_forward(self, consumer: Any, newest: dict[Any, int], wall: float) -> list[Any]:
        """Seek partitions whose newest record (ms) is older than ``max_lag`` ahead.

        Returns the partitions moved (records fetched before the seek are stale).
        """
        moved: list[Any] = []
        if self.max_lag is None:
            return moved
        floor_ms = (wall - self.max_lag) * 1000
        behind = [tp for tp, ts in newest.items() if ts < floor_ms]
        if not behind:
            return moved
        target = int((wall - self.max_lag / 2) * 1000)
        found = consumer.offsets_for_times({tp: target for tp in behind})
        for tp in behind:
            hit = found.get(tp)
            pos = consumer.position(tp)
            if hit is None:  # nothing that recent yet: to the end
                end = consumer.end_offsets([tp]).get(tp)
                new = None if end is None else int(end)
            else:
                new = int(hit.offset)
            if new is None or pos is None or new <= pos:
                continue
            consumer.seek(tp, new)
            moved.append(tp)
            skipped = new - pos
            self._skipped += skipped
            self._metrics.skipped_events.labels(source=self.source, reason="max_lag_records").inc(
                skipped
            )
            logger.warning(
                "kafka: %s[%d] lags more than --max-lag %gs: skipped %d records (to offset %d)",
                tp.topic,
                tp.partition,
                self.max_lag,
                skipped,
                new,
            )
        return moved

    def update_shed(self) -> float:
        """Fold the last interval's read and skipped records into the shed fraction."""
        total = self._read + self._skipped
        now = self._skipped / total if total else 0.0
        self._shed = _EMA * now + (1 - _EMA) * self._shed if total else self._shed * (1 - _EMA)
        self._read = self._skipped = 0
        self._metrics.shed_fraction.labels(source=self.source).set(self._shed)
        return self._shed
