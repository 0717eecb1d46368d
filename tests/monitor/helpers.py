"""Helpers of the MONITOR tests: format MONITOR lines exactly as Redis does."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hotkeyd.testing import paced_get_load

_monitor_c: ModuleType | None
try:
    from hotkeyd.sources.monitor import _monitor as _monitor_c
except ImportError:  # pragma: no cover - CI builds the extension
    _monitor_c = None

__all__ = ["Tally", "_monitor_c", "metric", "monitor_line", "sdscatrepr", "url"]


def url(rs: Any, userinfo: str = "") -> str:
    """The MONITOR URL of a test ``RedisServer`` (``userinfo`` like ``"user:pw@"``)."""
    return f"redis-monitor://{userinfo}127.0.0.1:{rs.port}"


def metric(m: Any, name: str, **labels: str) -> float:
    """Current value of one sample of a ``Metrics`` registry (0 when never set)."""
    v = m.registry.get_sample_value(name, labels)
    return float(v or 0.0)


def sdscatrepr(arg: bytes) -> bytes:
    """Quote one argument exactly as Redis' sdscatrepr() does in MONITOR lines."""
    out = bytearray(b'"')
    for c in arg:
        if c in (0x5C, 0x22):
            out += b"\\" + bytes([c])
        elif c in _NAMED:
            out += _NAMED[c]
        elif 0x20 <= c <= 0x7E:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)


_NAMED = {10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b"}


def monitor_line(
    args: list[bytes],
    db: int = 0,
    addr: bytes = b"127.0.0.1:5555",
    ts: bytes = b"1700000000.123456",
) -> bytes:
    """One MONITOR reply line as Redis writes it."""
    return (
        b"+" + ts + b" [%d " % db + addr + b"] " + b" ".join(sdscatrepr(a) for a in args) + b"\r\n"
    )


class Tally:
    """Accumulates what a MONITOR source hands over: scaled counts per (db, key)."""

    def __init__(self) -> None:
        self.total: dict[tuple[int, bytes], float] = {}
        self.writes: dict[tuple[int, bytes], float] = {}
        self.batches = 0
        self._src: Any = None

    def add(self, batches: list[Any]) -> None:
        for b in batches:
            self.batches += 1
            for k, c in zip(b.keys, b.counts or [1] * len(b.keys), strict=True):
                self.total[(b.db, k)] = self.total.get((b.db, k), 0.0) + c * b.scale
            for k, c in zip(b.writes or [], b.write_counts or [], strict=True):
                self.writes[(b.db, k)] = self.writes.get((b.db, k), 0.0) + c * b.scale

    @property
    def servers(self) -> set[str]:
        """The tapped servers that delivered MONITOR lines (of the last pumped source)."""
        taps = self._src.taps if self._src is not None else []
        return {t.target.display for t in taps if t.lines}

    def reads(self, db: int, key: bytes) -> float:
        return self.total.get((db, key), 0.0) - self.writes.get((db, key), 0.0)

    def pump(self, src: Any, until: Callable[[Tally], bool], timeout: float = 10.0) -> bool:
        """Drain ``src`` until ``until(self)`` holds or ``timeout`` passes."""
        self._src = src
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.add(src.next_batch(0.1))
            if until(self):
                return True
        return until(self)


def paced_load(port: int, rate: float, seconds: float) -> Any:
    """A steady GET load on key ``paced`` from another process (not slowed by the tap)."""
    return paced_get_load(port, rate, seconds)
