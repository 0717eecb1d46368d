"""Helpers of the fault matrix: a steady key load into a daemon, and a stopwatch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.service.daemon import Daemon


class Load:
    """Feeds ``keys`` (key -> accesses/s) into a daemon's stdin from a thread."""

    def __init__(self, daemon: Daemon, keys: dict[bytes, float]) -> None:
        self.daemon = daemon
        self.keys = keys
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.daemon.feed_rate(self.keys, seconds=0.2)
            except (BrokenPipeError, ValueError, OSError):  # the daemon was killed
                return

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def seconds_until(cond: Callable[[], object], timeout: float, interval: float = 0.02) -> float:
    """How long until ``cond()`` holds (raises AssertionError after ``timeout``)."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - t0


@pytest.fixture
def rules_ttl2(tmp_path: object) -> Iterator[str]:
    """A rules file: hot above 200/s, TTL 2 s (short, so TTL outcomes are quick to see)."""
    from pathlib import Path

    p = Path(str(tmp_path)) / "rules.toml"
    p.write_text("[default]\nthreshold = 200\nttl = 2\n")
    yield str(p)
