"""Logging at a limited rate, for failures that can repeat thousands of times a second."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """Log at most one line per ``interval`` seconds per key; count what was held back.

    Args:
        logger: where lines go.
        interval: minimum seconds between two lines with the same key.
        clock: monotonic time source (tests pass a manual one).
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, level: int, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``msg % args``, limited per message template (``msg`` is the key)."""
        return self.log(level, msg, msg, *args, exc_info=exc_info)

    def log(self, level: int, key: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than ``interval`` ago."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            self._logger.log(
                level, msg + " (%d similar suppressed)", *args, held, exc_info=exc_info
            )
        else:
            self._logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def error(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)
