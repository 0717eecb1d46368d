"""Detector configuration and the values the detector hands back to the service."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hotkeyd.errors import ConfigError
from hotkeyd.wire import CoolEntry, HotEntry

__all__ = ["DetectorConfig", "IngestResult", "RateEntry", "TickResult"]

_MIN_SLOT_MEMORY = 1024
_MAX_SUBWINDOWS = 1000


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
            quarter of that is added once a source reports writes).
        sketch: sketch kind for ``hotkeyd.sketch.new_sketch``.
        seed: sketch hash seed.
        max_key_len: longest key in bytes; longer ones are counted as oversized.
        top_n: default number of entries of :meth:`Detector.top`.
    """

    window: float = 1.0
    tick: float = 0.1
    hysteresis: float = 0.8
    max_hot: int = 1000
    k: int = 200
    memory: int = 1 << 20
    sketch: str = "heavykeeper"
    seed: int = 0
    max_key_len: int = 1024
    top_n: int = 100

    def __post_init__(self) -> None:
        def num(name: str, v: object) -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"detector {name} must be a finite number, got {v!r}")
            return float(v)

        def integer(name: str, v: object, lo: int, hi: int) -> None:
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(f"detector {name} must be an integer in [{lo}, {hi}], got {v!r}")

        window = num("window", self.window)
        tick = num("tick", self.tick)
        if not 0.01 <= window <= 3600:
            raise ConfigError(f"detector window must be in [0.01, 3600] seconds, got {window!r}")
        if not 0.001 <= tick <= window:
            raise ConfigError(
                f"detector tick must be in [0.001, window={window:g}] seconds, got {tick!r}"
            )
        n = window / tick
        if abs(n - round(n)) > 1e-6 * max(1.0, n) or round(n) > _MAX_SUBWINDOWS:
            raise ConfigError(
                f"detector window ({window:g}s) must be a whole multiple of tick ({tick:g}s), "
                f"at most {_MAX_SUBWINDOWS} ticks"
            )
        h = num("hysteresis", self.hysteresis)
        if not 0.0 < h <= 1.0:
            raise ConfigError(f"detector hysteresis must be in (0, 1], got {h!r}")
        integer("max_hot", self.max_hot, 1, 1_000_000)
        integer("k", self.k, 1, 1_000_000)
        integer("seed", self.seed, 0, (1 << 64) - 1)
        integer("max_key_len", self.max_key_len, 1, 1 << 20)
        integer("top_n", self.top_n, 1, 1_000_000)
        slots = self.subwindows + 1
        integer("memory", self.memory, _MIN_SLOT_MEMORY * slots, 1 << 36)
        if not isinstance(self.sketch, str) or not self.sketch:
            raise ConfigError(f"detector sketch must be a sketch kind name, got {self.sketch!r}")

    @property
    def subwindows(self) -> int:
        """Closed sub-windows a rate sums over (``window / tick``)."""
        return round(self.window / self.tick)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one :meth:`Detector.ingest` did with a batch.

    Attributes:
        events: accesses counted into the window (times their counts).
        oversized: keys longer than ``max_key_len`` (rejected).
        malformed: lines that could not be parsed (bad count, empty key).
        late: accesses whose event time was older than the window (counted, not rated).
    """

    events: int = 0
    oversized: int = 0
    malformed: int = 0
    late: int = 0


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
    """

    hot: list[HotEntry] = field(default_factory=list)
    still_hot: list[HotEntry] = field(default_factory=list)
    cool: list[CoolEntry] = field(default_factory=list)
    ts: float = 0.0
    closed: int = 0


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
