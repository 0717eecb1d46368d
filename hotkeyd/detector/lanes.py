"""Per-source time: each source's sub-window ring, advanced by that source's watermark.

A *lane* is the part of the detector one source writes into. Sources whose batches carry
no event time share one *processing-time* lane, closed by the monotonic clock (they all
see the same "now", so sharing cannot mix up their windows). A source whose batches carry
event times (Kafka record timestamps, MONITOR arrival times) gets an *event-time* lane of
its own: its sub-windows are numbered by event time (``floor(ts / tick)``) and close when
the source's **watermark** passes their end. So a source that lags 30 s is rated over its
own last window of event time -- a backlog keeps its real spread and does not look like a
burst -- and a second source that is on time is not disturbed by it.

Watermark of an event-time lane (seconds, Unix time):

- the newest event time seen from the source (the Kafka source keeps its partitions
  within half a window of each other, so nothing it delivers is older than the window);
- or a hint from the source that it is caught up (``Source.idle_watermark``): nothing
  older than the hint is still to come. A lane that has received a hint waits for hints
  when its data stops (a paused consumer is not mistaken for a quiet one);
- otherwise, when a lane that was on time (lag under one window) receives nothing for a
  tick of wall time, its watermark follows the wall clock (minus the lag it had), so the
  last sub-window of a source that went quiet is rated and its hot keys cool down (a
  straggler that comes later still lands in its sub-window while that is in the window);
- never older than ``now - max_lag``: a source further behind fast-forwards, and events
  older than that are skipped and counted (``hotkeyd_source_skipped_events_total``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from hotkeyd.detector.window import SubWindowRing
from hotkeyd.sketch import SketchLike

__all__ = ["EPS", "Lane"]

Renew = Callable[[SketchLike, Iterable[bytes] | None], SketchLike | None]
EPS = 1e-6  # in ticks: absorbs float error of times advanced in tick-sized steps


class Lane:
    """One source's ring (and write ring) and its watermark.

    Args:
        name: the source's lane name (labels metrics).
        event: event-time lane (True) or the shared processing-time lane (False).
        subwindows: ``N`` closed sub-windows per window.
        tick: sub-window length in seconds.
        factory: makes one read sketch; ``wfactory`` one write sketch.
        cache_cap: bound of each slot's estimate cache.
        start: index of the open sub-window.
        renew, wrenew: resize recycled sketches for the key lengths seen
            (``hotkeyd.detector.sizing.KeySizer.renew``), read and write ring.
    """

    def __init__(
        self,
        name: str,
        *,
        event: bool,
        subwindows: int,
        tick: float,
        factory: Callable[[], SketchLike],
        wfactory: Callable[[], SketchLike],
        cache_cap: int,
        start: int,
        renew: Renew | None = None,
        wrenew: Renew | None = None,
    ) -> None:
        self.name = name
        self.event = event
        self.tick = tick
        self.ring = SubWindowRing(subwindows, factory, cache_cap, start=start, renew=renew)
        self._wrenew = wrenew
        self.wring: SubWindowRing | None = None
        self._wfactory = wfactory
        self._cache_cap = cache_cap
        self.watermark = start * tick if event else 0.0
        self.hinted = False  # the source reports idle watermarks: never project
        self.last_batch_wall = 0.0
        self.lag_at_batch = 0.0  # wall - watermark when the last batch arrived

    def index_of(self, ts: float) -> int:
        """Sub-window number of event time ``ts`` (event lanes)."""
        return math.floor(ts / self.tick + EPS)

    @property
    def window_start(self) -> float:
        """Event time before which this lane cannot place events any more."""
        return (self.ring.cur - self.ring.n) * self.tick

    def write_ring(self) -> SubWindowRing:
        """The write ring, allocated on the first batch that reports writes."""
        if self.wring is None:
            self.wring = SubWindowRing(
                self.ring.n,
                self._wfactory,
                self._cache_cap,
                start=self.ring.cur,
                renew=self._wrenew,
            )
        return self.wring

    def advance(self, to: int) -> int:
        """Close sub-windows until ``to`` is the open one; returns how many closed."""
        closed = self.ring.advance(to)
        if self.wring is not None:
            self.wring.advance(to)
        return closed

    @property
    def nbytes(self) -> int:
        return self.ring.nbytes + (self.wring.nbytes if self.wring is not None else 0)

    def lag(self, wall: float) -> float:
        """Seconds the lane's data is behind ``wall`` (0 for the processing-time lane)."""
        return max(0.0, wall - self.watermark) if self.event else 0.0
