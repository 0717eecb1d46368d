"""Detector configuration and the values the detector hands back to the service."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from hotkeyd.errors import ConfigError
from hotkeyd.protocol.wire import CoolEntry, HotEntry

__all__ = [
    "DEFAULT_MAX_LAG",
    "SKETCH_KINDS",
    "DetectorConfig",
    "IngestResult",
    "RateEntry",
    "TickResult",
    "Transition",
    "same_setting",
    "setting",
]

DEFAULT_MAX_LAG = 60.0
"""Seconds a source may lag before it fast-forwards (``--max-lag``).

Why a minute: a restart, a deploy or a rebalance leaves a consumer 5-30 s behind, and that
backlog is exactly where the hot keys of a surge are, so it is rated in full. Data older
than a minute is of little use to caches whose hot entries live seconds (the default TTL
is 10 s): catching up on it would only delay fresh announcements.
"""

_MIN_SLOT_MEMORY = 1024
_MAX_SUBWINDOWS = 1000
SKETCH_KINDS = ("heavykeeper", "countmin")


def setting(
    default: Any,
    help: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Declare a setting once: default, help text and bounds.

    :class:`DetectorConfig` validates against the bounds, and the daemon's
    :class:`~hotkeyd.daemon.config.Settings` and the CLI options are derived from the
    same declaration (:func:`same_setting`), so they cannot drift apart.
    """
    meta = {"help": help, "lo": lo, "hi": hi, "lo_open": lo_open, "choices": choices}
    return field(default=default, metadata=meta)


def same_setting(name: str) -> Any:
    """A dataclass field declared like ``DetectorConfig.<name>`` (for Settings)."""
    f = DetectorConfig.__dataclass_fields__[name]
    return field(default=f.default, metadata=f.metadata)


@dataclass(frozen=True)
class DetectorConfig:
    """How the detector measures rates.

    Attributes:
        window: seconds of traffic a rate covers (sliding window).
        tick: seconds between evaluations; ``window`` must be a whole multiple of it.
            The window is made of ``window / tick`` closed sub-windows.
        hysteresis: a hot key cools once its rate stays below ``threshold * hysteresis``
            for the rule's cool-down; also the margin a newcomer needs to evict a hot
            key at the cap (its rate must exceed the evictee's by ``1 / hysteresis``).
        max_hot: most keys hot at once; the highest rates win.
        k: candidates kept per sub-window sketch (top-k size).
        memory: bytes for all read sub-window sketches together (a write ring of a
            quarter of that is added once a source reports writes); at least
            1 KiB per sub-window plus one.
        sketch: sketch kind for ``hotkeyd.sketch.new_sketch``.
        seed: sketch hash seed.
        max_key_len: longest key in bytes; longer ones are counted as oversized.
        adapt_keys: when ``k`` keys of the length seen need more than half a sub-window
            sketch, its key store takes bytes from its table (``adapt_keys`` of the
            sketch; ``hotkeyd/detector/sizing.py``). False: the store stops at half.
        top_n: default number of entries of :meth:`Detector.top`.
        max_lag: seconds an event-time source may lag behind the wall clock; older
            events are skipped and counted, and the source's watermark jumps ahead.
    """

    window: float = setting(1.0, "Sliding window for rates, seconds.", lo=0.01, hi=3600)
    tick: float = setting(
        0.1, "How often rates are re-evaluated, seconds (divides --window).", lo=0.001, hi=3600
    )
    hysteresis: float = setting(
        0.8, "A key cools below threshold x this.", lo=0.0, hi=1.0, lo_open=True
    )
    max_hot: int = setting(1000, "Cap on keys hot at once; highest rates win.", lo=1, hi=1_000_000)
    k: int = setting(200, "Candidate keys tracked per sub-window.", lo=1, hi=1_000_000)
    memory: int = setting(
        1 << 20, "Sketch memory budget, bytes (all sub-windows).", lo=_MIN_SLOT_MEMORY, hi=1 << 36
    )
    sketch: str = setting("heavykeeper", "Top-K sketch algorithm.", choices=SKETCH_KINDS)
    seed: int = setting(0, "Sketch hash seed.", lo=0, hi=(1 << 64) - 1)
    max_key_len: int = setting(1024, "Longer keys are rejected and counted.", lo=1, hi=1 << 20)
    adapt_keys: bool = setting(
        True, "Long keys: the sketch's key store may take bytes from its table."
    )
    top_n: int = setting(100, "Entries of the top-keys view.", lo=1, hi=1_000_000)
    max_lag: float = setting(
        DEFAULT_MAX_LAG,
        "Seconds a source may lag before it fast-forwards (older events skipped, counted).",
        lo=0.01,
        hi=7 * 86400,
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.name, getattr(self, f.name), f.default, f.metadata)
        window, tick = float(self.window), float(self.tick)
        if tick > window:
            raise ConfigError(
                f"detector tick must be in [0.001, window={window:g}] seconds, got {tick!r}"
            )
        n = window / tick
        if abs(n - round(n)) > 1e-6 * max(1.0, n) or round(n) > _MAX_SUBWINDOWS:
            raise ConfigError(
                f"detector window ({window:g}s) must be a whole multiple of tick ({tick:g}s), "
                f"at most {_MAX_SUBWINDOWS} ticks"
            )
        least = _MIN_SLOT_MEMORY * (self.subwindows + 1)
        if self.memory < least:
            raise ConfigError(
                f"detector memory must be >= {least} bytes for {self.subwindows} sub-windows "
                f"(1 KiB each plus one), got {self.memory!r}"
            )
        if float(self.max_lag) < window:
            raise ConfigError(
                f"detector max_lag must be >= window ({window:g}s), got {self.max_lag!r}"
            )

    @property
    def subwindows(self) -> int:
        """Closed sub-windows a rate sums over (``window / tick``)."""
        return round(self.window / self.tick)


def _check(name: str, v: object, default: object, meta: Mapping[str, Any]) -> None:
    """Type and bounds of one declared setting; a :class:`ConfigError` names it."""
    if isinstance(default, bool):
        if not isinstance(v, bool):
            raise ConfigError(f"detector {name} must be true or false, got {v!r}")
        return
    choices = meta.get("choices")
    if choices is not None:
        if v not in choices:
            raise ConfigError(f"detector {name} must be one of {', '.join(choices)}, got {v!r}")
        return
    lo, hi = meta["lo"], meta["hi"]
    assert lo is not None and hi is not None, name
    if isinstance(default, int):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(f"detector {name} must be an integer in [{lo}, {hi}], got {v!r}")
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"detector {name} must be a finite number, got {v!r}")
    low_ok = v > lo if meta.get("lo_open") else v >= lo
    if not (low_ok and v <= hi):
        left = "(" if meta.get("lo_open") else "["
        raise ConfigError(f"detector {name} must be in {left}{lo:g}, {hi:g}], got {v!r}")


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one :meth:`Detector.ingest` did with a batch.

    Attributes:
        events: accesses counted into the window (times their counts).
        oversized: keys longer than ``max_key_len`` (rejected).
        malformed: lines that could not be parsed (bad count, empty key).
        late: accesses whose event time was older than their source's window (an
            out-of-order straggler; counted, not rated).
        skipped: accesses older than ``max_lag`` (the source fast-forwarded past them).
    """

    events: int = 0
    oversized: int = 0
    malformed: int = 0
    late: int = 0
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class Transition:
    """One hot/cool transition, stamped with the event time it happened at.

    Attributes:
        kind: ``hot`` or ``cool`` (``reason`` tells cooled, evicted or now ignored).
        key, db: the key.
        rule: name of the rule in force.
        at: event time (Unix seconds) of the evaluation that made the change.
        since: when the key turned hot (equal to ``at`` for ``hot``).
        rate: rate at ``at``; ``peak``: highest rate while hot.
        reason: ``hot``, ``cool``, ``evict`` or ``ignore``.
    """

    kind: str
    key: bytes
    db: int
    rule: str
    at: float
    since: float
    rate: float
    peak: float
    reason: str


@dataclass(frozen=True, slots=True)
class TickResult:
    """Changes found by one :meth:`Detector.tick`.

    Attributes:
        hot: keys that turned hot (``since`` = wall time they were detected).
        still_hot: hot keys re-announced before their TTL runs out, or after a rules
            change altered their rule or TTL.
        cool: keys that stopped being hot (cooled, evicted at the cap, or now ignored).
        ts: wall time of the evaluation.
        closed: sub-windows closed by this call (0: nothing was due, nothing evaluated).
        transitions: every hot/cool change since the last tick, in order (a source
            catching up may turn a key hot and cool again between two ticks; ``hot`` and
            ``cool`` only hold the net change).
        as_of: event time the rates behind this result describe (the oldest source).
    """

    hot: list[HotEntry] = field(default_factory=list)
    still_hot: list[HotEntry] = field(default_factory=list)
    cool: list[CoolEntry] = field(default_factory=list)
    ts: float = 0.0
    closed: int = 0
    transitions: list[Transition] = field(default_factory=list)
    as_of: float = 0.0


@dataclass(frozen=True, slots=True)
class RateEntry:
    """One key of :meth:`Detector.top`: its rate at the last tick."""

    key: bytes
    db: int
    rate: float
    rule: str
    hot: bool
    since: float | None = None
    kind: str | None = None
    local: float = 0.0  # of ``rate``: reads/s apps served from their caches (demand reports)
