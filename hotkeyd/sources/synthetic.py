"""A synthetic workload source: seeded Zipf background traffic plus scheduled spikes.

Used by ``hotkeyd demo``, the detection-latency benchmark and tests. Events are
produced at the configured rates against the clock that is passed in, so the same
source drives a real-time demo or a simulated run with a manual clock.

Standard library only (``random.choices`` over cumulative Zipf weights): the demo
must not make every install carry numpy.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from hotkeyd.batch import Batch
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.sources.base import InMemorySource

__all__ = ["Spike", "SyntheticSource", "zipf_keys"]


@dataclass(frozen=True)
class Spike:
    """``key`` is accessed ``rate`` times per second between ``start`` and ``end``.

    Times are seconds since the source started.
    """

    key: bytes
    start: float
    end: float
    rate: float


def zipf_keys(universe: int, fmt: str = "item:%07d") -> list[bytes]:
    """The key names of a universe, rank 0 first."""
    return [(fmt % i).encode() for i in range(universe)]


class SyntheticSource(InMemorySource):
    """Zipf(``alpha``) traffic over ``universe`` keys at ``rate`` events/s, plus spikes.

    Args:
        rate: background events per second.
        universe: number of distinct background keys.
        alpha: Zipf exponent (higher = more skewed).
        spikes: scheduled hot keys.
        duration: stop (become exhausted) after this many seconds; None = forever.
        seed: RNG seed, so runs repeat exactly.
        clock: time source.
        max_batch: most events in one batch.
    """

    name = "synthetic"
    reports_idle = False

    def __init__(
        self,
        *,
        rate: float = 100_000.0,
        universe: int = 100_000,
        alpha: float = 1.0,
        spikes: Sequence[Spike] = (),
        duration: float | None = None,
        seed: int = 1,
        clock: Clock | None = None,
        max_batch: int = 200_000,
    ) -> None:
        self.rate = rate
        self.spikes = tuple(spikes)
        self.duration = duration
        self.clock = clock or SystemClock()
        self.max_batch = max_batch
        self.events = 0
        self._rng = random.Random(seed)
        cum = list(itertools.accumulate(float(r) ** -alpha for r in range(1, universe + 1)))
        total = cum[-1]
        self._cdf = [c / total for c in cum]  # cumulative share of rank 1, 1..2, ...
        self._keys = zipf_keys(universe)
        self._t0: float | None = None
        self._last = 0.0
        self._carry = 0.0
        self._spike_carry = [0.0] * len(self.spikes)
        self._exhausted = False

    def start(self) -> None:
        self._t0 = self.clock.monotonic()
        self._last = 0.0

    @property
    def elapsed(self) -> float:
        """Seconds since start() (0 before)."""
        return 0.0 if self._t0 is None else self.clock.monotonic() - self._t0

    def next_batch(self, max_wait: float) -> list[Batch]:
        if self._t0 is None:
            self.start()
        if self._exhausted:
            return []
        now = self.elapsed
        if self.duration is not None and now >= self.duration:
            now = self.duration
            self._exhausted = True
        dt = now - self._last
        if dt <= 0.002 and not self._exhausted:
            if max_wait > 0 and isinstance(self.clock, SystemClock):
                time.sleep(min(max_wait, 0.005))
            return []
        parts: list[bytes] = []
        want = self.rate * dt + self._carry
        n = min(int(want), self.max_batch)
        self._carry = want - n if n < self.max_batch else 0.0
        if n:
            parts.extend(self._rng.choices(self._keys, cum_weights=self._cdf, k=n))
        for i, s in enumerate(self.spikes):
            lo, hi = max(self._last, s.start), min(now, s.end)
            if hi > lo:
                want_s = s.rate * (hi - lo) + self._spike_carry[i]
                m = int(want_s)
                self._spike_carry[i] = want_s - m
                parts.extend([s.key] * m)
        self._last = now
        if not parts:
            return []
        if len(parts) > 1:
            self._rng.shuffle(parts)
        self.events += len(parts)
        return [Batch(lines=b"\n".join(parts) + b"\n", source=self.name)]

    def commit(self) -> None:
        """Nothing to acknowledge."""

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def close(self) -> None:
        self._exhausted = True
