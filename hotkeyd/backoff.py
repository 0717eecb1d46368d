"""Capped exponential backoff with jitter, shared by every reconnecting component."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Capped exponential backoff with jitter.

    The n-th delay is drawn uniformly from ``[d/2, d]`` with ``d = min(cap, base*2**n)``:
    the jitter keeps a fleet of daemons from reconnecting to a restarted Redis in
    lock-step, the half floor keeps the delay from collapsing to zero.
    """

    def __init__(
        self, base: float = 0.1, cap: float = 10.0, rng: random.Random | None = None
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self.attempt = 0

    @property
    def current(self) -> float:
        """Upper bound of the next delay: ``base`` after a reset, ``cap`` once grown."""
        return min(self.cap, self.base * (2 ** min(self.attempt, 62)))

    def next_delay(self) -> float:
        """Return the next delay and count one more failed attempt."""
        d = min(self.cap, self.base * (2 ** min(self.attempt, 62)))
        self.attempt += 1
        return self.rng.uniform(d / 2, d)

    def reset(self) -> None:
        """Forget past failures (after a success)."""
        self.attempt = 0
