"""Pure-Python twin of ``hotkeyd.replay._trace`` (same signature, same results)."""

from __future__ import annotations

import math
import re
from typing import Any

from hotkeyd.protocol.limits import COUNT_MAX

__all__ = ["split_ticks"]

_MS_ABOVE = 1e11
_MAX_COUNT = COUNT_MAX
_SEP = re.compile(rb"[ \t]+")


def _number(tok: bytes) -> float | None:
    """Like the C parser: ``digits.digits`` as integer + fraction / 10**n, else float()."""
    whole, dot, frac = tok.partition(b".")
    if whole.isdigit() and len(whole) <= 15 and (not dot or (frac.isdigit() and len(frac) <= 15)):
        t = float(int(whole))
        if dot:
            t += float(int(frac)) / float(10 ** len(frac))
        return t
    try:
        return float(tok)
    except ValueError:
        return None


def _parse(line: bytes) -> tuple[float, bytes, int, bytes] | None:
    """(ts, key, count, the count's digits as written: the C parser copies them as-is)."""
    if line[:1] in (b" ", b"\t"):
        return None
    parts = _SEP.split(line.rstrip(b" \t"))
    if len(parts) not in (2, 3) or len(parts[0]) > 63 or parts[0].strip(b"0123456789.eE+-"):
        return None
    ts = _number(parts[0])
    if ts is None:
        return None
    if not math.isfinite(ts) or ts < 0:
        return None
    if ts > _MS_ABOVE:
        ts /= 1000.0
    count, digits = 1, b"1"
    if len(parts) == 3:
        if not parts[2].isdigit():
            return None
        count, digits = int(parts[2]), parts[2]
        if not 0 < count <= _MAX_COUNT:
            return None
    return ts, parts[1], count, digits


TICK_INDEX_MAX = 9.0e18  # the C core's bound on a tick index (below 2^63)


def split_ticks(buf: Any, tick: float) -> tuple[list[tuple[int, bytes]], int, int]:
    """Split ``ts key [count]`` lines into ``(tick_index, key<TAB>count lines)`` segments."""
    if not (tick > 0) or not math.isfinite(tick):
        raise ValueError("tick must be a positive number")
    segments: list[tuple[int, bytes]] = []
    out: list[bytes] = []
    cur = 0
    have = False
    events = malformed = 0
    for line in bytes(buf).split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        got = _parse(line)
        if got is None:
            malformed += 1
            continue
        ts, key, count, digits = got
        q = math.floor(ts / tick + 1e-9) if math.isfinite(ts / tick) else None
        if q is None or not -TICK_INDEX_MAX <= q <= TICK_INDEX_MAX:
            malformed += 1  # a tick index outside int64: as the C core, which cannot hold it
            continue
        index = q
        if have and index != cur and out:
            segments.append((cur, b"".join(out)))
            out = []
        cur, have = index, True
        out.append(b"%s\t%s\n" % (key, digits))
        events += count
    if out:
        segments.append((cur, b"".join(out)))
    return segments, events, malformed
