"""The Detector facade: ingest batches, tick, report hot keys and top rates.

Single-threaded by design: the service calls ``ingest``, ``due`` and ``tick`` from
its loop. ``set_rules`` only swaps a reference, so calling it between two of those
(e.g. from a SIGHUP handler that runs in the loop's thread) is atomic.

Time (details in docs/detection.md and :mod:`hotkeyd.detector.lanes`):

- A batch without an event time (``Batch.ts is None``) goes into the open sub-window of
  the shared processing-time lane, closed every ``tick`` of ``clock.monotonic()``.
- A batch with an event time goes into its source's own event-time lane, into the
  sub-window its timestamp falls in. The lane closes sub-windows as the source's
  watermark passes them and the hot set is evaluated after each one, so a source catching
  up on a backlog is rated in its own event time, tick by tick, however fast it reads.
- An event older than its lane's window (an out-of-order straggler) is counted as late
  (``IngestResult.late``, ``hotkeyd_detector_late_events_total``); one older than
  ``max_lag`` is skipped and counted (``IngestResult.skipped``); one in the future
  (clock skew) is clamped to now.
- A key's rate is the sum over lanes of its count in each lane's window, so sources with
  different lags never mix their windows. The hot/cool state machine runs on the event
  time of the evaluation (never going backwards), so cool-downs and ``since`` are in
  event time; each announcement carries ``as_of`` (the most-behind lane's watermark) and
  ``lag_ms``.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from hotkeyd import native_or_twin
from hotkeyd.batch import Batch
from hotkeyd.clock import Clock
from hotkeyd.detector.config import (
    DetectorConfig,
    IngestResult,
    RateEntry,
    TickResult,
    Transition,
)
from hotkeyd.detector.intake import Intake, count_lines, count_nonempty_lines
from hotkeyd.detector.keys import decode_ident, encode_keys, encode_lines
from hotkeyd.detector.lanes import EPS, Lane
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.detector.served import ServedRing
from hotkeyd.detector.sizing import KeySizer
from hotkeyd.detector.state import HotCoolStates, HotKey
from hotkeyd.errors import ConfigError, SketchError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import CoolEntry, HotEntry
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sketch import SketchLike, new_sketch

__all__ = ["Detector"]

logger = logging.getLogger(__name__)

#: The per-tick work: the C core (native/tick.c) or its pure-Python twin, chosen once.
_tick, IMPLEMENTATION = native_or_twin("hotkeyd.detector._tick", "hotkeyd.detector._tick_py")

WRITE_SHARE = 0.9  # write fraction at or above which a hot key is "write"
READ_SHARE = 0.1  # write fraction at or below which a hot key is "read"
_PROCESSING = ""  # name of the shared processing-time lane
IDLE_TICKS = 1  # an on-time lane without hints follows the wall clock after this many quiet ticks
CROSSING_EVERY = 0.005  # seconds (monotonic) between two crossing checks of new input


class _Maker(Protocol):
    def __call__(self, key_bytes: int | None = None) -> SketchLike: ...


def _default_factory(config: DetectorConfig, memory: int) -> _Maker:
    """Makes one sketch of ``memory`` bytes; ``key_bytes=None`` is the sketch's default split."""

    def make(key_bytes: int | None = None) -> SketchLike:
        try:
            sk: SketchLike = new_sketch(
                config.sketch,
                k=config.k,
                memory=memory,
                seed=config.seed,
                max_key_len=config.max_key_len,
                key_bytes=key_bytes,
                adapt_keys=config.adapt_keys,  # only the automatic split (None) adapts
            )
        except (SketchError, ValueError, TypeError) as exc:
            raise ConfigError(
                f"detector sketch {config.sketch!r} with k={config.k}, {memory} bytes per "
                f"sub-window: {exc}"
            ) from exc
        return sk

    make()  # fail at construction with a clear ConfigError, not at first write
    return make


def _write_memory(config: DetectorConfig, slots: int) -> int:
    """Bytes per sketch of the write ring: a quarter of the read budget, or as much if too small."""
    try:
        _default_factory(config, config.memory // 4 // slots)
    except ConfigError:
        return config.memory // slots
    return config.memory // 4 // slots


class Detector:
    """Hot-key detector.

    Args:
        config: window, tick, cap, sketch sizing, max lag.
        rules: the rule set in force (replace with :meth:`set_rules`).
        clock: time source; ``monotonic`` closes processing-time sub-windows, ``time``
            is "now" for event times (lag, clamping, max lag).
        metrics: updated when given (ticks, tick duration, hot keys, transitions,
            late and skipped events, malformed inputs, per-source lag).
        sketch_factory: makes one empty sketch per sub-window (tests inject exact
            counters); by default ``hotkeyd.sketch.new_sketch`` sized from ``config``.
            Each lane (the processing-time one, one per event-time source) has
            ``window / tick + 1`` sketches of ``memory / (window / tick + 1)`` bytes.
        rate_all: rate every candidate at each evaluation, for :meth:`top`. False (replay,
            which never asks for top rates): rate only the keys whose count bound can reach
            the lowest threshold, and the hot ones; the transitions are the same.
    """

    def __init__(
        self,
        config: DetectorConfig,
        rules: RuleSet,
        clock: Clock,
        metrics: Metrics | None = None,
        sketch_factory: Callable[[], SketchLike] | None = None,
        *,
        rate_all: bool = True,
    ) -> None:
        if not isinstance(rules, RuleSet):
            raise TypeError(f"rules must be a RuleSet, got {type(rules).__name__}")
        self.config = config
        self._rules = rules
        self._clock = clock
        self._metrics = metrics
        self._n = config.subwindows
        self._tick = config.window / self._n
        slots = self._n + 1
        self._cache_cap = 4 * (self._n * config.k + config.max_hot) + 1024
        self._log = RateLimitedLog(logger, 10.0, clock.monotonic)
        self._renew = self._wrenew = None
        self._factory: Callable[[], SketchLike]
        self._wfactory: Callable[[], SketchLike]
        if sketch_factory is None:
            # Sketches sized for the key lengths seen, up to max_key_len (detector/sizing.py).
            rmem, wmem = config.memory // slots, _write_memory(config, slots)
            rmake, wmake = _default_factory(config, rmem), _default_factory(config, wmem)
            self._factory, self._wfactory = rmake, wmake
            ml, adapt = config.max_key_len, config.adapt_keys
            self._renew = KeySizer(rmake, config.k, rmem, ml, self._log, adapt=adapt).renew
            self._wrenew = KeySizer(wmake, config.k, wmem, ml, self._log, adapt=adapt).renew
        else:
            self._factory = self._wfactory = sketch_factory
        self._served = ServedRing(self._n)
        self._local: dict[bytes, float] = {}  # ident -> locally served rate at the last tick
        self._hot = HotCoolStates(config.max_hot, config.hysteresis)
        self._t0 = clock.monotonic()
        self._pcur = 0  # open processing-time sub-window (counted even without a lane)
        self._lanes: dict[str, Lane] = {}
        self._eval_now = 0.0  # event time of the last evaluation (never goes back)
        self._as_of = self._eval_now
        self._steps = 0  # event-lane sub-windows closed since the last tick()
        self._pending: list[tuple[list[HotKey], list[HotKey], list[tuple[HotKey, str]]]] = []
        self._transitions: list[Transition] = []
        self._last: dict[bytes, float] = {}  # ident -> rate at the last evaluation
        self._intake = Intake(config.max_key_len, self._log)
        self._prune = not rate_all
        self._fresh = False  # input since the last crossing check
        self._crossing_at = -math.inf

    # -- properties ---------------------------------------------------------------------
    @property
    def rules(self) -> RuleSet:
        return self._rules

    @property
    def nbytes(self) -> int:
        """Bytes held by all sub-window sketches of all lanes."""
        return sum(lane.nbytes for lane in self._lanes.values())

    def stats(self) -> dict[str, int]:
        """Sizes of the detector's per-key state; each is bounded whatever the cardinality.

        ``hot`` <= max_hot; ``rated`` (keys rated at the last tick) <= lanes * window/tick
        * k + max_hot; ``rule_cache`` <= the rule set's cache_size; ``estimate_cache``
        (largest per-sub-window cache) <= 4 * (window/tick * k + max_hot) + 1024.
        """
        caches = [lane.ring.cache_entries() for lane in self._lanes.values()]
        caches += [lane.wring.cache_entries() for lane in self._lanes.values() if lane.wring]
        return {
            "hot": len(self._hot),
            "rated": len(self._last),
            "rule_cache": self._rules.cache_len,
            "estimate_cache": max(caches, default=0),
        }

    def lags(self) -> dict[str, float]:
        """Seconds each event-time source's data is behind the wall clock."""
        wall = self._clock.time()
        return {lane.name: lane.lag(wall) for lane in self._lanes.values() if lane.event}

    def set_rules(self, rules: RuleSet) -> None:
        """Put ``rules`` in force from the next tick on (atomic reference swap)."""
        if not isinstance(rules, RuleSet):
            raise TypeError(f"rules must be a RuleSet, got {type(rules).__name__}")
        self._rules = rules

    # -- lanes --------------------------------------------------------------------------
    def _index_at(self, mono: float) -> int:
        return math.floor((mono - self._t0) / self._tick + EPS)

    def _lane(self, name: str, event: bool, start: int) -> Lane:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = Lane(
                name or "processing",
                event=event,
                subwindows=self._n,
                tick=self._tick,
                factory=self._factory,
                wfactory=self._wfactory,
                cache_cap=self._cache_cap,
                start=start,
                renew=self._renew,
                wrenew=self._wrenew,
            )
        return lane

    def _event_lane(self, name: str, ts: float) -> Lane:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lane(name, True, math.floor(ts / self._tick + EPS))
            lane.watermark = ts
        return lane

    def _advance_event_lane(self, lane: Lane, ts: float) -> None:
        """Move ``lane``'s watermark to ``ts``, evaluating after each closed sub-window.

        Once the lane's window is empty (after ``N + 1`` steps) further steps change no
        rate, so a gap in the data costs one more evaluation, not one per sub-window.
        """
        if ts > lane.watermark:
            lane.watermark = ts
        to = lane.index_of(lane.watermark)
        cur = lane.ring.cur
        if to <= cur:
            return
        last_full = min(to, cur + self._n + 1)
        # Catching up (more than a window behind): rate only keys that can turn hot.
        behind = self._clock.time() - to * self._tick > self.config.window
        for j in range(cur + 1, last_full + 1):
            lane.advance(j)
            self._evaluate(j * self._tick, prune=behind or j < to)
        if to > last_full:
            lane.advance(to)
            self._evaluate(to * self._tick)
        self._steps += to - cur

    def advance(self, source: str, watermark: float) -> None:
        """A source reports it is caught up: no event older than ``watermark`` is to come.

        From then on that source's lane moves only with its data and these hints (a
        paused consumer is not taken for a quiet one). A source not seen yet is ignored.
        """
        lane = self._lanes.get(source)
        if lane is None or not lane.event or not math.isfinite(watermark):
            return
        lane.hinted = True
        self._advance_event_lane(lane, min(watermark, self._clock.time()))

    # -- ingest -------------------------------------------------------------------------
    def ingest(self, batch: Batch, lane: str | None = None, hinted: bool = False) -> IngestResult:
        """Count one batch into its sub-window (one sketch call on the fast path).

        ``lane`` names the source's lane (default ``batch.source``); the service gives
        two sources of one kind different names so their windows stay apart. ``hinted``:
        the source reports when it is caught up (:meth:`advance`), so its lane never
        follows the wall clock on its own (a paused consumer is not a quiet one).
        """
        source = batch.source or "unknown"
        name = lane if lane is not None else source
        self._fresh = True
        ts = batch.ts
        if ts is not None and (
            isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts)
        ):
            self._log.warning(
                f"badts:{source}", "source %s: bad batch ts %r, using now", source, ts
            )
            ts = self._clock.time()
        target: Lane
        index: int | None
        skipped = False
        if ts is None:
            target = self._lane(_PROCESSING, False, self._pcur)
            index = target.ring.cur
        else:
            wall = self._clock.time()
            ts = min(float(ts), wall)  # clock skew: the future is now
            target = self._event_lane(name, ts)
            target.hinted = target.hinted or hinted
            target.last_batch_wall = wall
            floor_ts = wall - self.config.max_lag
            if target.watermark < floor_ts:
                self._advance_event_lane(target, floor_ts)  # fast-forward
            if ts < floor_ts:
                index, skipped = None, True
            else:
                if ts > target.watermark:
                    self._advance_event_lane(target, ts)
                target.lag_at_batch = wall - target.watermark
                index = target.index_of(ts)
                if index < target.ring.cur - self._n + 1:
                    # Older than the window: the oldest sub-window is about to drop out, so
                    # an event there would never be rated; anything older is late.
                    index = None if index < target.ring.cur - self._n else index + 1
        return self._count(batch, source, target, index, skipped)

    def _count(
        self, batch: Batch, source: str, lane: Lane, index: int | None, skipped: bool
    ) -> IngestResult:
        scale = batch.scale
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not (0 < scale < math.inf)
        ):
            self._log.warning(
                f"badscale:{source}", "source %s: bad batch scale %r, using 1", source, scale
            )
            scale = 1.0
        db = batch.db
        if isinstance(db, bool) or not isinstance(db, int) or db < 0:
            return self._reject_db(batch, source)
        slot = None if index is None else lane.ring.slot(index)
        sketch = None if slot is None else slot.sketch
        rw = batch.writes is not None
        if batch.lines is not None:
            if sketch is None:
                events, oversized, malformed = count_lines(batch.lines, batch.counted)
            else:
                buf = encode_lines(batch.lines, batch.db)
                events, oversized, malformed = sketch.update_lines(buf, counted=batch.counted)
        elif batch.keys is not None:
            events, oversized, malformed = self._intake.add_keys(
                sketch, batch.keys, batch.counts, batch.db, source
            )
        elif batch.writes is not None:  # a batch of writes only: they are the accesses
            events, oversized, malformed = self._intake.add_keys(
                sketch, batch.writes, batch.write_counts, batch.db, source
            )
        else:
            events = oversized = malformed = 0
        if slot is not None and index is not None:
            slot.touched(events, scale, rw)
            if batch.writes is not None and len(batch.writes) and events:
                wslot = lane.write_ring().slot(index)
                wev, _, _ = self._intake.add_keys(
                    wslot.sketch, batch.writes, batch.write_counts, batch.db, source
                )
                wslot.touched(wev, scale, True)
        late = skip = 0
        if index is None:
            if skipped:
                skip, events = events, 0
            else:
                late, events = events, 0
        if oversized or malformed or late or skip:
            self._count_bad(source, oversized, malformed, late, skip)
        return IngestResult(
            events=events, oversized=oversized, malformed=malformed, late=late, skipped=skip
        )

    def ingest_served(
        self, keys: Sequence[bytes], counts: Sequence[int], db: int = 0
    ) -> tuple[int, int]:
        """Add reads that apps served from their local caches (demand reports).

        They go into the processing-time lane (reports are current), so a hot key's rate
        is its total demand and it stays hot while that demand lasts. Only keys hot
        here count: a report for a key another instance owns, or that cooled
        meanwhile, changes nothing.

        Returns:
            ``(accesses added, entries ignored because the key is not hot here)``.
        """
        idents = encode_keys(keys, db)
        keep = self._hot.hot_indices(idents)
        ignored = len(idents) - len(keep)
        if not keep:
            return 0, ignored
        if ignored:
            keys = [keys[i] for i in keep]
            counts = [counts[i] for i in keep]
            idents = [idents[i] for i in keep]
        res = self.ingest(Batch(keys=list(keys), counts=list(counts), db=db, source="demand"))
        self._served.add_many(self._pcur, idents, counts)
        return res.events, ignored

    def _reject_db(self, batch: Batch, source: str) -> IngestResult:
        """A batch with an impossible database number: count it as malformed, rate nothing."""
        if batch.lines is not None:
            bad = count_nonempty_lines(batch.lines)
        else:
            bad = len(batch.keys if batch.keys is not None else batch.writes or ())
        self._log.warning(f"db:{source}", "source %s: bad db %r; batch dropped", source, batch.db)
        self._count_bad(source, 0, bad, 0, 0)
        return IngestResult(malformed=bad)

    def _count_bad(
        self, source: str, oversized: int, malformed: int, late: int, skipped: int
    ) -> None:
        m = self._metrics
        if m is not None:
            if oversized:
                m.malformed.labels(source=source, reason="oversized").inc(oversized)
            if malformed:
                m.malformed.labels(source=source, reason="malformed").inc(malformed)
            if late:
                m.late_events.inc(late)
            if skipped:
                m.skipped_events.labels(source=source, reason="max_lag").inc(skipped)
        if late:
            self._log.warning(
                f"late:{source}",
                "source %s: %d events older than the %gs window behind the source's newest "
                "(counted as late, not rated)",
                source,
                late,
                self.config.window,
            )
        if skipped:
            self._log.warning(
                f"skip:{source}",
                "source %s: %d events more than --max-lag %gs old (skipped and counted)",
                source,
                skipped,
                self.config.max_lag,
            )
        if oversized or malformed:
            self._log.warning(
                f"bad:{source}",
                "source %s: %d oversized keys, %d malformed lines",
                source,
                oversized,
                malformed,
            )

    # -- ticks --------------------------------------------------------------------------
    def due(self) -> float:
        """Seconds until the next sub-window closes (<= 0: call :meth:`tick` now)."""
        if self._pending:
            return 0.0
        next_at = self._t0 + (self._pcur + 1 - EPS) * self._tick
        return next_at - self._clock.monotonic()

    def _rule_of(self, rules: RuleSet) -> Callable[[bytes], Rule]:
        def rule_of(ident: bytes) -> Rule:
            return rules.match(decode_ident(ident)[1])

        return rule_of

    def _follow_wall(self, wall: float) -> None:
        """Event lanes that went quiet follow the wall clock; none lags past max_lag."""
        floor_ts = wall - self.config.max_lag
        quiet = IDLE_TICKS * self._tick
        for lane in list(self._lanes.values()):
            if not lane.event:
                continue
            if lane.watermark < floor_ts:
                self._advance_event_lane(lane, floor_ts)
            elif (
                not lane.hinted
                and lane.lag_at_batch <= self.config.window
                and wall - lane.last_batch_wall >= quiet - EPS * self._tick
            ):
                self._advance_event_lane(lane, wall - lane.lag_at_batch)

    def tick(self) -> TickResult:
        """Close the sub-windows due by now (catching up if late) and evaluate once.

        Returns the changes of this evaluation plus those of the evaluations that event-time
        lanes ran since the last call (a source catching up closes many sub-windows).
        """
        now = self._clock.monotonic()
        wall = self._clock.time()
        target = self._index_at(now)
        closed = 0
        if target > self._pcur:
            closed = target - self._pcur
            self._pcur = target
            self._served.advance(target)
            self._local = {k: v / self.config.window for k, v in self._served.sums(target).items()}
            self._follow_wall(wall)
            proc = self._lanes.get(_PROCESSING)
            if proc is not None:
                proc.advance(target)
                self._evaluate(wall)
            m = self._metrics
            if m is not None:
                for name, lag in self.lags().items():
                    m.source_lag.labels(source=name).set(lag)
        closed += self._steps
        self._steps = 0
        if not self._pending:
            return TickResult(ts=wall, closed=closed, as_of=self._as_of)
        return self._flush(wall, closed)

    def crossing_in(self) -> float:
        """Seconds until :meth:`crossing` may check input not checked yet (inf: none is).

        The service waits no longer than this for more input, so input that arrived within
        ``CROSSING_EVERY`` of the last check is checked as soon as that interval is over,
        not only after the next batch.
        """
        if not self._fresh:
            return math.inf
        return max(0.0, self._crossing_at + CROSSING_EVERY - self._clock.monotonic())

    def crossing(self) -> TickResult | None:
        """Announce the keys that crossed their threshold since the last evaluation.

        A burst at 10x its threshold reaches it 100 ms into a 1 s window; evaluated only at
        sub-window close it would be seen up to one tick later. So between closes the
        service calls this after ingest: a key whose count over at most the last window
        (the open, partial sub-window plus the ``N - 1`` closed ones before it, summed over
        the lanes) reaches its rule's threshold turns hot now (one C call on the open
        sub-windows' top-k). Only cold -> hot happens here; cooling, hysteresis,
        cool-downs and evictions at the cap stay at the close. Skipped (None) without new
        input, within ``CROSSING_EVERY`` of the last check, or while a source is more than
        a window behind (its "now" is not now).
        """
        if not self._fresh or not self._lanes:
            return None
        mono = self._clock.monotonic()
        if mono - self._crossing_at < CROSSING_EVERY:
            return None
        self._crossing_at = mono
        self._fresh = False
        wall = self._clock.time()
        lanes = list(self._lanes.values())
        if len(self._hot) >= self.config.max_hot or any(
            lane.lag(wall) > self.config.window for lane in lanes
        ):
            return None
        rules = self._rules
        # Lanes add up: a key reaching the threshold reaches 1/lanes of it in one lane.
        need = rules.min_threshold * self.config.window / len(lanes)
        # Most checks find nothing: a cheap bound (no key outside the hot set can reach
        # ``need`` in any lane) skips the candidate selection, with the same outcome.
        hot, nhot = self._hot, len(self._hot)
        if all((b := lane.ring.crossing_bound(hot, nhot)) is None or b < need for lane in lanes):
            return None
        arrays = []
        for lane in lanes:
            a = lane.ring.partial_arrays()
            if a is None:
                continue
            fn, sketches, caches, factors, tops, ks = a
            # Candidates: the open sub-window's top-k whose count there plus their top-k
            # bound in the closed ones may reach ``need`` (no estimates: this runs often).
            top = _tick.may_cross(tops[0], factors[0], tops[1:], ks[1:], factors[1:], need)
            if top:
                arrays.append((fn, sketches, caches, factors, [top] + [{}] * (len(tops) - 1), ks))
        if not arrays:
            return None
        rates, contenders = _tick.evaluate(
            arrays,
            (),
            0.0,
            False,  # no pruning: only the open sub-window's top-k are candidates at all
            rules.min_threshold,
            1.0 / self.config.window,
            self._cache_cap,
            False,
        )
        contenders = [ident for ident in contenders if ident not in self._hot]
        if not contenders:
            return None
        at = max(wall, self._eval_now) if all(not lane.event for lane in lanes) else self._eval_now
        new = self._hot.admit(rates, contenders, self._rule_of(rules), self._eval_now, at)
        if not new:
            return None
        # The counts are as of now for on-time lanes (event ones: their watermark).
        as_of = min(min(lane.watermark, wall) if lane.event else wall for lane in lanes)
        lag_ms = max(0, round((wall - as_of) * 1000))
        m = self._metrics
        if m is not None:
            m.hot_keys.set(len(self._hot))
            m.transitions.labels(kind="hot").inc(len(new))
        return TickResult(
            hot=[replace(self._entry(hk), as_of=as_of, lag_ms=lag_ms) for hk in new],
            ts=wall,
            transitions=[self._transition("hot", hk, "hot", at) for hk in new],
            as_of=as_of,
        )

    def _flush(self, wall: float, closed: int) -> TickResult:
        """Fold the evaluations since the last tick into one result (net hot/cool)."""
        pending, self._pending = self._pending, []
        transitions, self._transitions = self._transitions, []
        new: dict[bytes, HotKey] = {}
        still: dict[bytes, HotKey] = {}
        cooled: dict[bytes, HotKey] = {}
        for tr_new, tr_still, tr_cooled in pending:
            for hk, _ in tr_cooled:
                if new.pop(hk.ident, None) is None:  # hot and cool within one tick: no news
                    cooled[hk.ident] = hk
                still.pop(hk.ident, None)
            for hk in tr_new:
                if cooled.pop(hk.ident, None) is not None:
                    still[hk.ident] = hk  # cooled and hot again: re-announce
                else:
                    new[hk.ident] = hk
            for hk in tr_still:
                if hk.ident not in new:
                    still[hk.ident] = hk
        kinds = self._kinds([hk.ident for hk in self._hot])
        for hk in self._hot:
            hk.kind = kinds.get(hk.ident)
        lag_ms = max(0, round((wall - self._as_of) * 1000))
        return TickResult(
            hot=[self._entry(hk, lag_ms) for hk in new.values()],
            still_hot=[self._entry(hk, lag_ms) for hk in still.values() if hk.ident in self._hot],
            cool=[self._cool_entry(hk) for hk in cooled.values()],
            ts=wall,
            closed=closed,
            transitions=transitions,
            as_of=self._as_of,
        )

    def _evaluate(self, at: float, prune: bool = False) -> None:
        """Rate every candidate over every lane's window and update the hot set.

        ``prune`` (a source catching up, more than a window behind): candidates whose count
        bound cannot reach the lowest threshold are not rated, and the rates are not kept
        for :meth:`top` (which shows the last full evaluation until the source is on time).
        """
        started = time.perf_counter()
        if at > self._eval_now:
            self._eval_now = at
        now = self._eval_now
        wall = self._clock.time()
        self._as_of = min(
            (
                min(lane.ring.cur * self._tick, lane.watermark) if lane.event else wall
                for lane in self._lanes.values()
            ),
            default=wall,
        )
        rules = self._rules
        prune = prune or self._prune
        # Lanes add up: a key reaching the threshold reaches 1/lanes of it in one lane.
        need = rules.min_threshold * self.config.window / max(1, len(self._lanes))
        # One call: the candidates (top-k of every closed sub-window, pruned to those that
        # can reach ``need``, plus the hot keys), their rates over all lanes' windows, and
        # the ones at or above the lowest threshold (native/tick.c or its twin).
        rates, contenders = _tick.evaluate(
            [lane.ring.arrays() for lane in self._lanes.values()],
            self._hot.idents(),
            need,
            prune,
            rules.min_threshold,
            1.0 / self.config.window,
            self._cache_cap,
            not prune,
        )
        # Cool-downs run on the evaluation clock (never backwards); ``since`` and the
        # transitions carry the event time of the lane whose step triggered this evaluation.
        at = min(at, now)
        tr = self._hot.evaluate(
            rates, self._rule_of(rules), now, at, rules.min_threshold, contenders
        )
        if not prune:
            self._last = rates
        if tr.new or tr.cooled or tr.still:
            self._pending.append((tr.new, tr.still, tr.cooled))
        for hk in tr.new:
            self._transitions.append(self._transition("hot", hk, "hot", at))
        for hk, reason in tr.cooled:
            self._transitions.append(self._transition("cool", hk, reason, at))
        if tr.new or tr.cooled:
            logger.debug(
                "eval: %d new hot, %d cooled, %d hot", len(tr.new), len(tr.cooled), len(self._hot)
            )
        m = self._metrics
        if m is not None:
            m.ticks.inc()
            m.tick_seconds.observe(time.perf_counter() - started)
            m.hot_keys.set(len(self._hot))
            if tr.new:
                m.transitions.labels(kind="hot").inc(len(tr.new))
            for reason in ("cool", "evict", "ignore"):
                n = sum(1 for _, r in tr.cooled if r == reason)
                if n:
                    m.transitions.labels(kind=reason).inc(n)

    @staticmethod
    def _transition(kind: str, hk: HotKey, reason: str, at: float) -> Transition:
        db, key = decode_ident(hk.ident)
        return Transition(
            kind=kind,
            key=key,
            db=db,
            rule=hk.rule.name,
            at=at,
            since=hk.since_wall,
            rate=hk.rate,
            peak=hk.peak,
            reason=reason,
        )

    def _write_sums(self, idents: list[bytes]) -> dict[bytes, float] | None:
        """Write counts of ``idents`` over all lanes' windows (None when no source could tell)."""
        rings = [lane.wring for lane in self._lanes.values() if lane.wring is not None]
        if not idents or not rings or not any(lane.ring.any_rw() for lane in self._lanes.values()):
            return None
        out = dict.fromkeys(idents, 0.0)
        for ring in rings:
            for k, v in ring.sums(idents).items():
                out[k] += v
        return out

    def _kinds(self, idents: list[bytes]) -> dict[bytes, str | None]:
        """Read/write mix of ``idents`` over the window (empty when no source could tell)."""
        writes = self._write_sums(idents)
        if writes is None:
            return {}
        window = self.config.window
        out: dict[bytes, str | None] = {}
        for ident in idents:
            total = self._last.get(ident, 0.0) * window
            if total <= 0:
                continue
            share = min(1.0, writes.get(ident, 0.0) / total)
            out[ident] = (
                "write" if share >= WRITE_SHARE else "read" if share <= READ_SHARE else "mixed"
            )
        return out

    def _entry(self, hk: HotKey, lag_ms: int | None = None) -> HotEntry:
        db, key = decode_ident(hk.ident)
        return HotEntry(
            key=key,
            rate=hk.rate,
            rule=hk.rule.name,
            ttl_ms=hk.rule.ttl_ms,
            since=hk.since_wall,
            db=db,
            kind=hk.kind,
            as_of=self._as_of if lag_ms is not None else None,
            lag_ms=lag_ms,
        )

    @staticmethod
    def _cool_entry(hk: HotKey) -> CoolEntry:
        db, key = decode_ident(hk.ident)
        return CoolEntry(key=key, rule=hk.rule.name, db=db)

    def stop_transitions(self) -> list[Transition]:
        """``cool`` transitions (reason ``stop``) for every key hot now: the daemon stops."""
        return [self._transition("cool", hk, "stop", self._eval_now) for hk in self._hot]

    # -- queries ------------------------------------------------------------------------
    def hot(self) -> list[HotEntry]:
        """The current hot set with the rates of the last evaluation, highest rate first."""
        lag_ms = max(0, round((self._clock.time() - self._as_of) * 1000))
        return sorted(
            (self._entry(hk, lag_ms) for hk in self._hot), key=lambda e: (-e.rate, e.db, e.key)
        )

    def top(self, n: int | None = None) -> list[RateEntry]:
        """The ``n`` (default ``config.top_n``) highest rates at the last tick.

        Keys matched by an ``ignore`` rule are listed too (``hot=False``), so an
        operator can see traffic the rules chose to leave alone. Keys whose rate is
        now 0 (a hot key in its cool-down after its traffic stopped) are left out.
        """
        n = self.config.top_n if n is None else n
        if n <= 0:
            return []
        # hot()'s order: rate descending, then (db, key) ascending. Picked by ident (cheap),
        # then the n picked are ordered exactly (only ties at the cut may pick differently).
        picked = _smallest_by_rate_then_ident(self._last, n)
        best = sorted(picked, key=lambda kv: (-kv[1], *decode_ident(kv[0])))
        kinds = self._kinds([ident for ident, _ in best])
        rule_of = self._rule_of(self._rules)
        out: list[RateEntry] = []
        for ident, rate in best:
            db, key = decode_ident(ident)
            hk = self._hot.get(ident)
            out.append(
                RateEntry(
                    key=key,
                    db=db,
                    rate=rate,
                    rule=(hk.rule if hk is not None else rule_of(ident)).name,
                    hot=hk is not None,
                    since=hk.since_wall if hk is not None else None,
                    kind=kinds.get(ident),
                    local=min(rate, self._local.get(ident, 0.0)),
                )
            )
        return out


def _smallest_by_rate_then_ident(rates: dict[bytes, float], n: int) -> list[tuple[bytes, float]]:
    """The ``n`` positive ``(ident, rate)`` first by (rate descending, ident ascending).

    What ``heapq.nsmallest(n, positive, key=lambda kv: (-kv[1], kv[0]))`` returns, without
    a Python key call per entry: this runs every tick over every rated candidate (a
    uniform background gives thousands, most tied at the same small rate). The ``n``-th
    largest rate is the cut; every rate above it is taken, and the ties at the cut by
    ident.
    """
    cut = 0.0 if len(rates) <= n else heapq.nlargest(n, rates.values())[-1]
    if cut <= 0.0:
        live = [(ident, rate) for ident, rate in rates.items() if rate > 0.0]
        live.sort(key=_by_rate_then_ident)
        return live[:n]
    above = [(ident, rate) for ident, rate in rates.items() if rate > cut]
    above.sort(key=_by_rate_then_ident)
    tied = sorted(ident for ident, rate in rates.items() if rate == cut)
    return above + [(ident, cut) for ident in tied[: n - len(above)]]


def _by_rate_then_ident(kv: tuple[bytes, float]) -> tuple[float, bytes]:
    return -kv[1], kv[0]
