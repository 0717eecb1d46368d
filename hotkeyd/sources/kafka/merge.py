"""Hand records on in timestamp order across partitions (per-source watermark alignment).

kafka-python returns a poll's records partition by partition: after a pause, a whole
partition's backlog may come before another's. The detector rates a source in its own
event time, so records of the partition read second would look older than the window
(late), or a hot key's cool-down would run on another partition's clock. This buffer
holds each partition's records and releases them only up to the oldest timestamp that
every partition still being read has reached: a partition that is caught up (nothing left
below its high watermark) does not hold the others back, and nothing is held longer than
``max_hold`` seconds (a partition whose fetches stall cannot block the rest), so memory
stays bounded by what one ``max_hold`` of fetching brings.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["TimeMerge"]


class TimeMerge:
    """Per-partition buffers released in timestamp order.

    Args:
        max_hold: seconds (monotonic) a record may wait for slower partitions.
    """

    def __init__(self, max_hold: float = 1.0) -> None:
        self.max_hold = max_hold
        self._buf: dict[Any, collections.deque[Any]] = {}
        self._since: dict[Any, float] = {}  # tp -> when its oldest buffered record arrived
        self._newest: dict[Any, int] = {}  # tp -> newest timestamp (ms) fetched

    def __len__(self) -> int:
        return sum(len(b) for b in self._buf.values())

    def add(self, tp: Any, records: list[Any], now: float) -> None:
        if not records:
            return
        buf = self._buf.setdefault(tp, collections.deque())
        if not buf:
            self._since[tp] = now
        buf.extend(records)
        self._newest[tp] = max(self._newest.get(tp, -1), records[-1].timestamp)

    def drop(self, tps: Iterable[Any]) -> None:
        """Forget partitions (revoked, or seeked elsewhere)."""
        for tp in tps:
            self._buf.pop(tp, None)
            self._since.pop(tp, None)
            self._newest.pop(tp, None)

    def release(
        self, assigned: Iterable[Any], caught_up: Callable[[Any], bool], now: float
    ) -> list[tuple[Any, list[Any]]]:
        """Records safe to hand on, per partition, each list in offset order."""
        bound: float | None = None
        for tp in assigned:
            if caught_up(tp):
                continue
            ts = self._newest.get(tp)
            if ts is None:  # still being read, nothing seen yet: hold everything
                bound = float("-inf")
                break
            bound = ts if bound is None else min(bound, ts)
        out: list[tuple[Any, list[Any]]] = []
        for tp, buf in self._buf.items():
            if not buf:
                continue
            if bound is None or now - self._since.get(tp, now) >= self.max_hold:
                ready = list(buf)
                buf.clear()
            else:
                ready = []
                while buf and buf[0].timestamp <= bound:
                    ready.append(buf.popleft())
            if buf:
                if ready:
                    self._since[tp] = now
            else:
                self._since.pop(tp, None)
            if ready:
                out.append((tp, ready))
        return out
