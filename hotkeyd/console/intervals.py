"""Hot intervals for people: the table of ``hotkeyd history`` and ``hotkeyd replay``.

Also the time arguments both commands take: a duration (``90s``, ``15m``, ``1h``, ``4d``)
or a point in time (Unix seconds, or ISO 8601 such as ``2026-11-30T02:55:00Z``).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable
from typing import Any

from hotkeyd.console.text import show_key
from hotkeyd.detector.intervals import Interval
from hotkeyd.errors import ConfigError

__all__ = ["intervals_json", "parse_duration", "parse_when", "render_intervals"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(text: str) -> float:
    """``"1h"`` -> 3600.0; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"bad duration {text!r}: use e.g. 90s, 15m, 1h, 4d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_when(text: str, *, now: float) -> float:
    """A point in time: Unix seconds, ISO 8601 (UTC unless it says), or ``<duration>`` ago."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    if _DURATION.match(t):
        return now - parse_duration(t)
    try:
        dt = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"bad time {text!r}: use Unix seconds, ISO 8601 (2026-11-30T02:55:00Z) or a "
            "duration ago (1h)"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.timezone.utc)
    return dt.timestamp()


def _clock(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render_intervals(rows: Iterable[Interval], *, extra: str | None = None) -> str:
    """One line per interval: start, end, duration, peak rate, rule, key (times in UTC)."""
    lines = [
        f"{'START (UTC)':<23}  {'END':<23}  {'DURATION':>9}  {'PEAK/S':>10}  {'RULE':<12}  KEY"
    ]
    n = 0
    for iv in rows:
        n += 1
        end = "(still hot)" if iv.end is None else _clock(iv.end)
        dur = "-" if iv.end is None else f"{iv.end - iv.start:.1f}s"
        key = show_key(iv.key) + (f" (db {iv.db})" if iv.db else "")
        lines.append(
            f"{_clock(iv.start):<23}  {end:<23}  {dur:>9}  {iv.peak:>10.1f}  {iv.rule:<12}  {key}"
        )
    if n == 0:
        lines.append("(no hot keys in this time range)")
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def intervals_json(rows: Iterable[Interval]) -> list[dict[str, Any]]:
    """``to_json()`` of each interval, for ``--json``."""
    return [iv.to_json() for iv in rows]
