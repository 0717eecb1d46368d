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


class _Coalescer:
    """Merges the batches that arrive between two watermark steps, one batch per sub-window.

    A batch whose ``ts`` is not past the newest so far moves no watermark, closes nothing
    and evaluates nothing; only the slot it lands in matters. So all such batches up to
    the next one that moves time forward are counted together, one merged batch per
    sub-window (per db and kind), each keeping its batches' order: every sketch sees the
    same sequence of keys as when they were fed one by one, and every evaluation the same
    counts. A slightly out-of-order trace with millisecond timestamps alternates between
    two sub-windows at each boundary; merged, it feeds the sketch in a few large batches
    per sub-window instead of dozens of small ones.
    """

    __slots__ = ("newest", "parts")

    def __init__(self) -> None:
        self.newest = -1.0
        self.parts: dict[tuple[float, int, bool, float, str, bool], list[Batch]] = {}

    @staticmethod
    def _key(b: Batch, ts: float) -> tuple[float, int, bool, float, str, bool] | None:
        if b.writes is not None or (b.lines is None) == (b.keys is None):
            return None
        return (ts, b.db, b.counted, b.scale, b.source, b.lines is not None)

    def add(self, b: Batch, ts: float) -> list[Batch]:
        """Batches to ingest now (in order); ``b`` may be held back until a later step."""
        out: list[Batch] = []
        key = self._key(b, ts) if ts <= self.newest else None
        if key is None:
            out = self.drain()
            if ts > self.newest:
                self.newest = ts
            out.append(b)
            return out
        self.parts.setdefault(key, []).append(b)
        return out

    def drain(self) -> list[Batch]:
        out = [_merge(parts) for parts in self.parts.values()]
        self.parts = {}
        return out


def _merge(parts: list[Batch]) -> Batch:
    first = parts[0]
    if len(parts) == 1:
        return first
    if first.lines is not None:
        lines = b"".join(bytes(p.lines or b"") for p in parts)
        return Batch(
            lines=lines,
            counted=first.counted,
            ts=first.ts,
            scale=first.scale,
            db=first.db,
            source=first.source,
        )
    keys: list[bytes] = []
    counts: list[int] = []
    for p in parts:
        ks = list(p.keys or ())
        keys += ks
        counts += [1] * len(ks) if p.counts is None else list(p.counts)
    return Batch(
        keys=keys, counts=counts, ts=first.ts, scale=first.scale, db=first.db, source=first.source
    )


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
    det = Detector(cfg, rules, clock, sketch_factory=sketch_factory, rate_all=False)
    res = ReplayResult()
    n = 0
    held = _Coalescer()

    def ingest(todo: list[Batch]) -> None:
        nonlocal n
        for b in todo:
            ts = b.ts
            assert ts is not None
            if ts > clock.now:
                clock.now = ts
            r = det.ingest(b, lane=_LANE)
            res.events += r.events
            res.late += r.late
            res.malformed += r.malformed + r.oversized
            n += 1
            if n % _FLUSH_EVERY == 0:
                res.transitions += det.tick().transitions

    for b in batches:
        ts = b.ts
        if ts is None:
            res.malformed += _size(b)
            continue
        if res.first_ts is None or ts < res.first_ts:
            res.first_ts = ts
        ingest(held.add(b, ts))
    ingest(held.drain())
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
