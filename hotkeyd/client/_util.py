"""Small helpers shared by the client modules (key bytes, rate-limited logging, backoff)."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

__all__ = ["Backoff", "RateLimitedLog", "key_bytes"]


def key_bytes(key: Any) -> bytes:
    """Encode a key the way redis-py does, so the hot-set lookup matches the wire key.

    redis-py sends ``str`` as UTF-8 and numbers as their ``repr``; the daemon reports
    the bytes it saw, so both sides meet on bytes.
    """
    cls = key.__class__
    if cls is bytes:
        return key
    if cls is str:
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, bool):
        raise TypeError("a Redis key cannot be a bool")
    if isinstance(key, (int, float)):
        return repr(key).encode("ascii")
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"a Redis key must be bytes, str, int or float, not {cls.__name__}")


class RateLimitedLog:
    """Log a recurring problem at most once per ``every`` seconds, with a count.

    Bad input and connection flaps are counted on every occurrence (metrics) but logged
    rarely, so a flood cannot fill the disk or slow the hot loop.
    """

    def __init__(self, logger: logging.Logger, every: float = 10.0) -> None:
        self._logger = logger
        self._every = every
        self._last = -1e18
        self._suppressed = 0

    def __call__(self, level: int, msg: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._last < self._every:
            self._suppressed += 1
            return
        self._last = now
        if self._suppressed:
            msg += " (%d similar suppressed)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self._logger.log(level, msg, *args, exc_info=exc_info)


class Backoff:
    """Exponential backoff with full jitter, reset after a success."""

    def __init__(self, initial: float = 0.05, maximum: float = 5.0) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"need 0 < initial <= maximum, got {initial}, {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self) -> float:
        """Delay before the next attempt (grows until :meth:`reset`)."""
        cur = self._next
        self._next = min(self._next * 2, self.maximum)
        return random.uniform(cur / 2, cur)  # jitter, not crypto

    def reset(self) -> None:
        self._next = self.initial
