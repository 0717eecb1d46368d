"""Clocks passed into the detector and service, so tests can drive time.

Two readings are kept apart on purpose: ``monotonic()`` drives ticks, windows and
cool-downs (it never jumps), ``time()`` stamps messages for humans and other hosts.
"""

from __future__ import annotations

import threading
import time as _time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Where hotkeyd reads the time."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()


class ManualClock:
    """A clock that moves only when told to; for tests and simulations.

    Args:
        start: initial monotonic reading.
        epoch: wall-clock reading that corresponds to ``start``.
    """

    def __init__(self, start: float = 1000.0, epoch: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._offset = epoch - start

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._now + self._offset

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must be >= 0)."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards (seconds={seconds})")
        with self._lock:
            self._now += seconds
