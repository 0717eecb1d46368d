"""What the console remembers in memory: each hot key's recent rate, and its intervals.

The detector only knows the current window; a browser asking "what did this key do in
the last ten minutes" needs a little history. This keeps it bounded: one second-resolution
ring of ``seconds`` rates per tracked key (two fixed arrays, no per-sample objects), at most
``max_keys`` keys (the least recently seen goes first), the last demand report of each app
(at most ``max_reporters`` apps and ``max_report_bytes`` of reports, the least recently
heard goes first; shown for tracked keys only, at most ``max_apps`` apps per key), and the
last ``max_intervals`` hot intervals this daemon saw (the console's history when there is
no Redis stream).

A fleet's reports arrive at thousands per second with a hundred entries each, so taking
one costs O(1): the report's entry lists (the ones queued for the detector) are kept as
they are, and a key's page finds the key in each app's last report when it is asked.

Written by the daemon loop once per tick (:meth:`KeyMemory.record`) and by the demand
intake's thread (:meth:`KeyMemory.demand`), read by HTTP threads: a lock guards all, and
readers copy out what they need.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from hotkeyd.detector.config import RateEntry, Transition
from hotkeyd.detector.intervals import Interval
from hotkeyd.protocol.wire import HotEntry

__all__ = ["AppReport", "KeyMemory", "Track"]

Ident = tuple[int, bytes]  # (db, key)
Served = tuple[int, Sequence[bytes], Sequence[int]]  # (db, keys, counts) of one report


class AppReport(NamedTuple):
    """The last demand report of one app for one key."""

    ts: float  # the report's own ts (the app's clock)
    n: int  # reads the app served locally in the report's interval (after the intake's cap)
    interval_ms: int


@dataclass
class Track:
    """One key's rate ring: ``rates[s % n]`` is valid when ``secs[s % n] == s``."""

    n: int
    rates: array[float] = field(init=False)
    secs: array[int] = field(init=False)
    last: int = 0
    local: float = 0.0
    kind: str | None = None
    rule: str = ""
    hot: bool = False

    def __post_init__(self) -> None:
        self.rates = array("d", bytes(8 * self.n))
        self.secs = array("q", [-1]) * self.n

    def put(self, sec: int, rate: float) -> None:
        i = sec % self.n
        self.rates[i] = rate
        self.secs[i] = sec
        self.last = sec

    def series(self, now: int, seconds: int) -> list[float | None]:
        """Rates of the ``seconds`` seconds up to ``now`` (None: not tracked then)."""
        out: list[float | None] = []
        n, rates, secs = self.n, self.rates, self.secs
        for s in range(now - seconds + 1, now + 1):
            i = s % n
            out.append(rates[i] if secs[i] == s else None)
        return out


class KeyMemory:
    """Bounded in-memory history of the keys the detector reported.

    Args:
        seconds: rate history kept per key, at 1 s resolution (10 minutes by default).
        max_keys: keys tracked at most; the least recently seen is dropped first.
        max_intervals: finished hot intervals kept (newest win).
        max_apps: apps shown per key at most (the most recently heard).
        max_reporters: apps whose last demand report is kept at most.
        max_report_bytes: the kept reports' wire sizes summed, at most.
    """

    def __init__(
        self,
        seconds: int = 600,
        max_keys: int = 5000,
        max_intervals: int = 10_000,
        max_apps: int = 64,
        max_reporters: int = 10_000,
        max_report_bytes: int = 16 << 20,
    ) -> None:
        self.seconds = seconds
        self.max_keys = max_keys
        self.max_apps = max_apps
        self.max_reporters = max_reporters
        self.max_report_bytes = max_report_bytes
        self.dropped_apps = 0  # apps' last reports forgotten by the max_reporters/bytes caps
        self._reports: OrderedDict[str, tuple[float, int, Sequence[Served], int]] = OrderedDict()
        self._report_bytes = 0
        self._lock = threading.Lock()
        self._tracks: OrderedDict[Ident, Track] = OrderedDict()
        self._open: dict[Ident, Transition] = {}
        self._closed: deque[Interval] = deque(maxlen=max_intervals)
        self.started: float | None = None
        self.dropped_keys = 0  # tracks evicted by the max_keys cap

    def record(
        self,
        now: float,
        top: Sequence[RateEntry],
        transitions: Iterable[Transition] = (),
        hot: Sequence[HotEntry] = (),
    ) -> None:
        """Take one tick's rates (several ticks in one second: the last one wins).

        ``top`` rows carry the LOCAL share; ``hot`` adds the hot keys beyond the top list.
        """
        sec = int(now)
        with self._lock:
            if self.started is None:
                self.started = now
            tracks = self._tracks
            for r in top:
                ident = (r.db, r.key)
                t = tracks.get(ident)
                if t is None:
                    if not r.hot and len(tracks) >= self.max_keys:
                        continue  # a cold key never pushes out a tracked one
                    t = tracks[ident] = Track(self.seconds)
                else:
                    tracks.move_to_end(ident)
                t.put(sec, r.rate)
                t.local, t.kind, t.rule, t.hot = r.local, r.kind, r.rule, r.hot
            for h in hot:
                ident = (h.db, h.key)
                t = tracks.get(ident)
                if t is None:
                    t = tracks[ident] = Track(self.seconds)
                elif t.last == sec and t.hot:
                    continue  # the top list had it this second
                else:
                    tracks.move_to_end(ident)
                t.put(sec, h.rate)
                t.kind, t.rule, t.hot = h.kind, h.rule, True
            for tr in transitions:
                ident = (tr.db, tr.key)
                if tr.kind == "hot":
                    self._open[ident] = tr
                    continue
                self._open.pop(ident, None)
                self._closed.append(
                    Interval(tr.key, tr.db, tr.rule, tr.since, tr.at, tr.peak, reason=tr.reason)
                )
            while len(tracks) > self.max_keys:
                tracks.popitem(last=False)
                self.dropped_keys += 1
            stale = sec - self.seconds
            while tracks:
                ident, t = next(iter(tracks.items()))
                if t.last > stale:
                    break
                del tracks[ident]

    def demand(
        self, app: str, ts: float, interval_ms: int, groups: Sequence[Served], size: int = 0
    ) -> None:
        """One admitted demand report of ``app``: ``(db, keys, counts)`` groups (read,
        never changed) and its size on the wire. O(1): the entries are not looked at."""
        with self._lock:
            old = self._reports.pop(app, None)
            if old is not None:
                self._report_bytes -= old[3]
            self._reports[app] = (ts, interval_ms, groups, size)
            self._report_bytes += size
            while len(self._reports) > self.max_reporters or (
                self._report_bytes > self.max_report_bytes and len(self._reports) > 1
            ):
                _, gone = self._reports.popitem(last=False)
                self._report_bytes -= gone[3]
                self.dropped_apps += 1

    def apps(self, ident: Ident) -> dict[str, AppReport]:
        """The last report of each app for ``ident``, oldest first (at most ``max_apps``,
        the most recently heard); empty when none, or when the key is not tracked."""
        db, key = ident
        with self._lock:
            if ident not in self._tracks:
                return {}  # a report naming other keys shows nothing (and keeps nothing)
            reports = list(self._reports.items())
        found: list[tuple[str, AppReport]] = []
        for app, (ts, interval_ms, groups, _size) in reversed(reports):
            for gdb, keys, counts in groups:
                if gdb != db:
                    continue
                try:
                    i = keys.index(key)  # the intake merged repeats: one entry per key
                except ValueError:
                    continue
                found.append((app, AppReport(ts, counts[i], interval_ms)))
                break
            if len(found) >= self.max_apps:
                break
        return dict(reversed(found))

    def sparks(self, idents: Iterable[Ident], now: float, seconds: int = 60) -> dict[Ident, str]:
        """Last ``seconds`` of each key as digits 0-8 (scaled to its own peak; '-' unknown)."""
        sec = int(now)
        out: dict[Ident, str] = {}
        with self._lock:
            for ident in idents:
                t = self._tracks.get(ident)
                if t is None:
                    continue
                vals = t.series(sec, seconds)
                peak = max((v for v in vals if v is not None), default=0.0)
                scale = 8.0 / peak if peak > 0 else 0.0
                out[ident] = "".join("-" if v is None else str(round(v * scale)) for v in vals)
        return out

    def series(self, ident: Ident, now: float) -> list[list[float]] | None:
        """``[[second, rate], ...]`` over the history kept, or None when not tracked."""
        sec = int(now)
        with self._lock:
            t = self._tracks.get(ident)
            if t is None:
                return None
            vals = t.series(sec, self.seconds)
        start = sec - self.seconds + 1
        return [[start + i, round(v, 3)] for i, v in enumerate(vals) if v is not None]

    def track(self, ident: Ident) -> Track | None:
        with self._lock:
            return self._tracks.get(ident)

    def intervals(self, now: float) -> list[Interval]:
        """Intervals this daemon saw since it started, open ones ending None."""
        with self._lock:
            out = list(self._closed)
            out += [
                Interval(t.key, t.db, t.rule, t.since, None, t.peak) for t in self._open.values()
            ]
        out.sort(key=lambda i: (i.start, i.key))
        return out

    def __len__(self) -> int:
        return len(self._tracks)
