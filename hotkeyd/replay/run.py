"""Run the detector over recorded batches in event time, as fast as the CPU allows.

The same :class:`~hotkeyd.detector.Detector` and rules as the daemon, on a clock that
*is* the trace's event time: every sub-window is closed and evaluated in order, so the
hot/cool timeline is the one a daemon reading the traffic live would have produced
(cool-downs and ``since`` in event time). The result lists each hot interval with its
start, end, peak rate and rule.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from hotkeyd.batch import Batch
from hotkeyd.detector.config import DetectorConfig, Transition
from hotkeyd.detector.detector import Detector
from hotkeyd.detector.intervals import Interval, from_transitions
from hotkeyd.detector.rules import RuleSet

__all__ = ["ReplayClock", "ReplayResult", "replay"]

_LANE = "replay"
_FLUSH_EVERY = 256  # batches between collecting transitions


class ReplayClock:
    """A clock whose "now" is the newest event time fed so far (both readings)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        intervals: hot intervals in start order (``end`` None: still hot at the end).
        transitions: every hot/cool transition, in order.
        events: accesses rated; ``late``: older than the window behind the newest
            (out of order); ``malformed``: bad lines or keys.
        first_ts, last_ts: event time covered.
        seconds: wall time the replay took.
    """

    intervals: list[Interval] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    events: int = 0
    late: int = 0
    malformed: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "intervals": [iv.to_json() for iv in self.intervals],
            "events": self.events,
            "late": self.late,
            "malformed": self.malformed,
            "from": self.first_ts,
            "to": self.last_ts,
            "seconds": round(self.seconds, 3),
        }


def replay(
    batches: Iterable[Batch],
    config: DetectorConfig,
    rules: RuleSet,
    *,
    sketch_factory: Any = None,
) -> ReplayResult:
    """Feed ``batches`` (each with ``ts``) to a fresh detector in event time.

    Batches without ``ts`` are counted as malformed. ``max_lag`` is lifted (a replay is
    all backlog).
    """
    started = time.perf_counter()
    clock = ReplayClock()
    cfg = replace(config, max_lag=7 * 86400.0)
    det = Detector(cfg, rules, clock, sketch_factory=sketch_factory)
    res = ReplayResult()
    n = 0
    for b in batches:
        ts = b.ts
        if ts is None:
            res.malformed += _size(b)
            continue
        if ts > clock.now:
            clock.now = ts
        if res.first_ts is None or ts < res.first_ts:
            res.first_ts = ts
        r = det.ingest(b, lane=_LANE)
        res.events += r.events
        res.late += r.late
        res.malformed += r.malformed + r.oversized
        n += 1
        if n % _FLUSH_EVERY == 0:
            res.transitions += det.tick().transitions
    if res.first_ts is not None:
        res.last_ts = clock.now
        end = clock.now + cfg.tick  # close the last sub-window: its counts are rated too
        clock.now = end
        det.advance(_LANE, end)
    res.transitions += det.tick().transitions
    res.intervals = from_transitions(res.transitions, det.stop_transitions())
    res.seconds = time.perf_counter() - started
    return res


def _size(b: Batch) -> int:
    if b.keys is not None:
        return len(b.keys)
    return bytes(b.lines or b"").count(b"\n")
