"""The Detector facade: ingest batches, tick, report hot keys and top rates.

Single-threaded by design: the service calls ``ingest``, ``due`` and ``tick`` from
its loop. ``set_rules`` only swaps a reference, so calling it between two of those
(e.g. from a SIGHUP handler that runs in the loop's thread) is atomic.

Event-time policy (``Batch.ts``; details in docs/detection.md):

- ``ts is None``: processing time, the batch goes into the open sub-window.
- ``now - window <= ts <= now``: the batch goes into the sub-window its timestamp
  falls in, so a backlog read after consumer lag keeps its real spread over time
  and does not look like a burst. (A timestamp in the sub-window that is about to
  leave the window is moved one sub-window forward, so it is still rated once.)
- ``ts < now - window``: too old to rate; counted as late (``IngestResult.late``,
  ``hotkeyd_detector_late_events_total``).
- ``ts > now`` (clock skew): clamped to now.

Wall time is mapped to sub-windows with ``clock.time()``; sub-windows themselves are
closed on ``clock.monotonic()``.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from hotkeyd.batch import Batch
from hotkeyd.clock import Clock
from hotkeyd.detector.config import DetectorConfig, IngestResult, RateEntry, TickResult
from hotkeyd.detector.intake import Intake, count_lines, count_nonempty_lines
from hotkeyd.detector.keys import decode_ident, encode_ident, encode_lines
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.detector.served import ServedRing
from hotkeyd.detector.sizing import KeySizer
from hotkeyd.detector.state import HotKey, HotSet
from hotkeyd.detector.window import SubWindowRing
from hotkeyd.errors import ConfigError, SketchError
from hotkeyd.metrics import Metrics
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sketch import SketchLike
from hotkeyd.wire import CoolEntry, HotEntry

__all__ = ["Detector"]

logger = logging.getLogger(__name__)

_EPS = 1e-6  # in ticks: absorbs float error of clocks advanced in tick-sized steps
WRITE_SHARE = 0.9  # write fraction at or above which a hot key is "write"
READ_SHARE = 0.1  # write fraction at or below which a hot key is "read"


class _Maker(Protocol):
    def __call__(self, key_bytes: int | None = None) -> SketchLike: ...


def _default_factory(config: DetectorConfig, memory: int) -> _Maker:
    """Makes one sketch of ``memory`` bytes; ``key_bytes=None`` is the sketch's default split."""
    try:
        from hotkeyd.sketch import new_sketch
    except ImportError as exc:  # pragma: no cover - only before the sketch module exists
        raise ConfigError(f"sketch kind {config.sketch!r} is unavailable: {exc}") from exc

    def make(key_bytes: int | None = None) -> SketchLike:
        try:
            sk: SketchLike = new_sketch(
                config.sketch,
                k=config.k,
                memory=memory,
                seed=config.seed,
                max_key_len=config.max_key_len,
                key_bytes=key_bytes,
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
        config: window, tick, cap, sketch sizing.
        rules: the rule set in force (replace with :meth:`set_rules`).
        clock: time source; ``monotonic`` drives ticks, ``time`` maps event times.
        metrics: updated when given (ticks, tick duration, hot keys, transitions,
            late events, malformed inputs).
        sketch_factory: makes one empty sketch per sub-window (tests inject exact
            counters); by default ``hotkeyd.sketch.new_sketch`` sized from ``config``.
    """

    def __init__(
        self,
        config: DetectorConfig,
        rules: RuleSet,
        clock: Clock,
        metrics: Metrics | None = None,
        sketch_factory: Callable[[], SketchLike] | None = None,
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
            self._renew = KeySizer(rmake, config.k, rmem, config.max_key_len, self._log).renew
            self._wrenew = KeySizer(wmake, config.k, wmem, config.max_key_len, self._log).renew
        else:
            self._factory = self._wfactory = sketch_factory
        self._ring = SubWindowRing(self._n, self._factory, self._cache_cap, renew=self._renew)
        self._wring: SubWindowRing | None = None
        self._served = ServedRing(self._n)
        self._local: dict[bytes, float] = {}  # ident -> locally served rate at the last tick
        self._hot = HotSet(config.max_hot, config.hysteresis)
        self._t0 = clock.monotonic()
        self._last: dict[bytes, float] = {}  # ident -> rate at the last tick
        self._intake = Intake(config.max_key_len, self._log)

    # -- properties ---------------------------------------------------------------------
    @property
    def rules(self) -> RuleSet:
        return self._rules

    @property
    def nbytes(self) -> int:
        """Bytes held by all sub-window sketches (read ring, plus write ring if any)."""
        return self._ring.nbytes + (self._wring.nbytes if self._wring is not None else 0)

    def stats(self) -> dict[str, int]:
        """Sizes of the detector's per-key state; each is bounded whatever the cardinality.

        ``hot`` <= max_hot; ``rated`` (keys rated at the last tick) <= window/tick * k +
        max_hot; ``rule_cache`` <= the rule set's cache_size; ``estimate_cache`` (largest
        per-sub-window cache) <= 4 * (window/tick * k + max_hot) + 1024.
        """
        return {
            "hot": len(self._hot),
            "rated": len(self._last),
            "rule_cache": self._rules.cache_len,
            "estimate_cache": max(
                self._ring.cache_entries(), self._wring.cache_entries() if self._wring else 0
            ),
        }

    def set_rules(self, rules: RuleSet) -> None:
        """Put ``rules`` in force from the next tick on (atomic reference swap)."""
        if not isinstance(rules, RuleSet):
            raise TypeError(f"rules must be a RuleSet, got {type(rules).__name__}")
        self._rules = rules

    # -- ingest -------------------------------------------------------------------------
    def _index_at(self, mono: float) -> int:
        return math.floor((mono - self._t0) / self._tick + _EPS)

    def _place(self, ts: float | None, source: str) -> int | None:
        """Sub-window index for a batch with event time ``ts``; None when too old."""
        cur = self._ring.cur
        if ts is None:
            return cur
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            self._log.warning(
                f"badts:{source}", "source %s: bad batch ts %r, using now", source, ts
            )
            return cur
        age = self._clock.time() - ts
        if age <= 0.0:
            return cur
        if age > self.config.window:
            return None
        index = math.floor((self._clock.monotonic() - age - self._t0) / self._tick + _EPS)
        return min(cur, max(cur - self._n + 1, index))

    def ingest(self, batch: Batch) -> IngestResult:
        """Count one batch into its sub-window (one sketch call on the fast path)."""
        source = batch.source or "unknown"
        index = self._place(batch.ts, source)
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
        slot = None if index is None else self._ring.slot(index)
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
                self._ingest_writes(index, batch, scale, source)
        late = 0
        if index is None:
            late, events = events, 0
        if oversized or malformed or late:
            self._count_bad(source, oversized, malformed, late)
        return IngestResult(events=events, oversized=oversized, malformed=malformed, late=late)

    def ingest_served(
        self, keys: Sequence[bytes], counts: Sequence[int], db: int = 0
    ) -> tuple[int, int]:
        """Add reads that apps served from their local caches (demand reports).

        They go into the same windows as the sources' accesses, so a hot key's rate
        is its total demand and it stays hot while that demand lasts. Only keys hot
        here count: a report for a key another instance owns, or that cooled
        meanwhile, changes nothing.

        Returns:
            ``(accesses added, entries ignored because the key is not hot here)``.
        """
        hot = self._hot
        idents = [encode_ident(k, db) for k in keys]
        keep = [i for i, ident in enumerate(idents) if ident in hot]
        if not keep:
            return 0, len(idents)
        res = self.ingest(
            Batch(
                keys=[keys[i] for i in keep],
                counts=[counts[i] for i in keep],
                db=db,
                source="demand",
            )
        )
        cur = self._ring.cur
        for i in keep:
            self._served.add(cur, idents[i], counts[i])
        return res.events, len(idents) - len(keep)

    def _reject_db(self, batch: Batch, source: str) -> IngestResult:
        """A batch with an impossible database number: count it as malformed, rate nothing."""
        if batch.lines is not None:
            bad = count_nonempty_lines(batch.lines)
        else:
            bad = len(batch.keys if batch.keys is not None else batch.writes or ())
        self._log.warning(f"db:{source}", "source %s: bad db %r; batch dropped", source, batch.db)
        self._count_bad(source, 0, bad, 0)
        return IngestResult(malformed=bad)

    def _ingest_writes(self, index: int, batch: Batch, scale: float, source: str) -> None:
        assert batch.writes is not None
        if self._wring is None:  # allocated on the first batch that reports writes
            self._wring = SubWindowRing(
                self._n, self._wfactory, self._cache_cap, start=self._ring.cur, renew=self._wrenew
            )
        slot = self._wring.slot(index)
        events, _, _ = self._intake.add_keys(
            slot.sketch, batch.writes, batch.write_counts, batch.db, source
        )
        slot.touched(events, scale, True)

    def _count_bad(self, source: str, oversized: int, malformed: int, late: int) -> None:
        m = self._metrics
        if m is not None:
            if oversized:
                m.malformed.labels(source=source, reason="oversized").inc(oversized)
            if malformed:
                m.malformed.labels(source=source, reason="malformed").inc(malformed)
            if late:
                m.late_events.inc(late)
        if late:
            self._log.warning(
                f"late:{source}",
                "source %s: %d events older than the %gs window (counted as late, not rated)",
                source,
                late,
                self.config.window,
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
        next_at = self._t0 + (self._ring.cur + 1 - _EPS) * self._tick
        return next_at - self._clock.monotonic()

    def _rule_of(self, rules: RuleSet) -> Callable[[bytes], Rule]:
        def rule_of(ident: bytes) -> Rule:
            return rules.match(decode_ident(ident)[1])

        return rule_of

    def tick(self) -> TickResult:
        """Close the sub-windows due by now (catching up if late) and evaluate once."""
        now = self._clock.monotonic()
        wall = self._clock.time()
        target = self._index_at(now)
        if target <= self._ring.cur:
            return TickResult(ts=wall)
        started = time.perf_counter()
        closed = self._ring.advance(target)
        if self._wring is not None:
            self._wring.advance(target)
        self._served.advance(target)
        rules = self._rules
        candidates = self._ring.candidates()
        candidates.update(self._hot.idents())
        inv = 1.0 / self.config.window
        rates = {
            k: v * inv for k, v in self._ring.sums(candidates).items() if v > 0 or k in self._hot
        }
        tr = self._hot.evaluate(rates, self._rule_of(rules), now, wall, rules.min_threshold)
        self._last = rates
        self._local = {k: v * inv for k, v in self._served.sums(target).items()}
        kinds = self._kinds([hk.ident for hk in self._hot])
        for hk in self._hot:
            hk.kind = kinds.get(hk.ident)
        result = TickResult(
            hot=[self._entry(hk) for hk in tr.new],
            still_hot=[self._entry(hk) for hk in tr.still],
            cool=[self._cool_entry(hk) for hk, _ in tr.cooled],
            ts=wall,
            closed=closed,
        )
        if tr.new or tr.cooled:
            logger.debug(
                "tick: %d new hot, %d cooled, %d hot", len(tr.new), len(tr.cooled), len(self._hot)
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
        return result

    def _kinds(self, idents: list[bytes]) -> dict[bytes, str | None]:
        """Read/write mix of ``idents`` over the window (empty when no source could tell)."""
        wring = self._wring
        if not idents or wring is None or not self._ring.any_rw():
            return {}
        writes = wring.sums(idents)
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

    def _entry(self, hk: HotKey) -> HotEntry:
        db, key = decode_ident(hk.ident)
        return HotEntry(
            key=key,
            rate=hk.rate,
            rule=hk.rule.name,
            ttl_ms=hk.rule.ttl_ms,
            since=hk.since_wall,
            db=db,
            kind=hk.kind,
        )

    @staticmethod
    def _cool_entry(hk: HotKey) -> CoolEntry:
        db, key = decode_ident(hk.ident)
        return CoolEntry(key=key, rule=hk.rule.name, db=db)

    # -- queries ------------------------------------------------------------------------
    def hot(self) -> list[HotEntry]:
        """The current hot set with the rates of the last tick, highest rate first."""
        return sorted((self._entry(hk) for hk in self._hot), key=lambda e: (-e.rate, e.db, e.key))

    def top(self, n: int | None = None) -> list[RateEntry]:
        """The ``n`` (default ``config.top_n``) highest rates at the last tick.

        Keys matched by an ``ignore`` rule are listed too (``hot=False``), so an
        operator can see traffic the rules chose to leave alone. Keys whose rate is
        now 0 (a hot key in its cool-down after its traffic stopped) are left out.
        """
        n = self.config.top_n if n is None else n
        if n <= 0:
            return []
        live = ((ident, rate) for ident, rate in self._last.items() if rate > 0.0)
        # ties in hot()'s order: rate descending, then (db, key) ascending
        best = heapq.nsmallest(n, live, key=lambda kv: (-kv[1], *decode_ident(kv[0])))
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
