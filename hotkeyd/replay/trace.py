"""Timestamped trace files as event-time batches.

Formats (detected from the first non-empty line):

- text: ``<ts> <key>`` or ``<ts> <key> <count>`` per line, space or TAB separated;
  ``ts`` in Unix seconds (or milliseconds, when above 1e11). Keys cannot contain spaces
  here: use JSON lines for those. Parsed by a C fast path (``_trace``; pure-Python twin
  ``_trace_py`` when ``HOTKEYD_PURE_PYTHON=1`` or not built).
- JSON lines: ``{"ts": 1764470000.25, "key": "item:1", "count": 3}`` (``count`` default
  1; ``"enc": "base64"`` for binary keys; ``db`` default 0); the timestamp field is
  ``ts`` unless told otherwise.

Lines must be roughly in time order: an event more than one window older than the newest
so far is counted as late, like a straggler in a live stream. Bad lines are counted as
malformed, never fatal.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from hotkeyd import native_or_twin
from hotkeyd.batch import Batch
from hotkeyd.protocol import strictjson
from hotkeyd.protocol.limits import COUNT_MAX

__all__ = ["IMPLEMENTATION", "TraceStats", "read_trace", "split_ticks"]

logger = logging.getLogger(__name__)

_CHUNK = 8 << 20


_impl, IMPLEMENTATION = native_or_twin("hotkeyd.replay._trace", "hotkeyd.replay._trace_py")
split_ticks: Callable[..., Any] = _impl.split_ticks


@dataclass
class TraceStats:
    """What reading a trace found."""

    lines_events: int = 0
    malformed: int = 0
    first_ts: float | None = None
    last_ts: float | None = None

    def saw(self, ts: float) -> None:
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts


def read_trace(
    f: IO[bytes],
    tick: float,
    stats: TraceStats,
    *,
    ts_field: str = "ts",
    start: float | None = None,
    end: float | None = None,
    source: str = "replay",
) -> Iterator[Batch]:
    """Batches of one tick each (``Batch.ts`` mid-tick), in file order.

    Events outside ``[start, end)`` (when given) are left out without being counted.
    """
    head = f.read(_CHUNK)
    first = head.lstrip()[:1]
    if first == b"{":
        yield from _json_lines(head, f, tick, stats, ts_field, start, end, source)
        return
    # One reusable buffer: the partial last line moves to the front, no chunk is copied.
    buf = bytearray(_CHUNK * 2)
    view = memoryview(buf)
    have = len(head)
    buf[:have] = head
    while True:
        cut = buf.rfind(b"\n", 0, have) + 1
        if cut:
            yield from _segments(view[:cut], tick, stats, start, end, source)
            rest = have - cut
            buf[:rest] = view[cut:have]
            have = rest
        if have == len(buf):  # one line longer than the buffer: grow it
            view.release()
            buf.extend(bytes(len(buf)))
            view = memoryview(buf)
        n = f.readinto(view[have:])  # type: ignore[attr-defined]  # files, stdin, BytesIO
        if not n:
            break
        have += n
    if have:
        yield from _segments(bytes(view[:have]), tick, stats, start, end, source)
    view.release()


def _segments(
    data: Any, tick: float, stats: TraceStats, start: float | None, end: float | None, source: str
) -> Iterator[Batch]:
    segments, events, malformed = split_ticks(data, tick)
    stats.malformed += malformed
    for index, lines in _merge_back(segments):
        ts = (index + 0.5) * tick
        if (start is not None and ts < start) or (end is not None and ts >= end):
            continue
        stats.saw(ts)
        yield Batch(lines=lines, counted=True, ts=ts, source=source)
    stats.lines_events += events


def _merge_back(segments: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Join the segments that step back in time into one per tick, up to the next step on.

    A slightly out-of-order trace alternates between two ticks at each boundary (dozens of
    small segments). A segment whose tick is not past the newest one of the chunk moves no
    watermark, so it can be counted together with the others of its tick until a segment
    moves time forward; each tick keeps its lines in file order (the replay does the same
    across chunks, hotkeyd.replay.run).
    """
    out: list[tuple[int, bytes]] = []
    held: dict[int, list[bytes]] = {}
    newest: int | None = None
    for index, lines in segments:
        if newest is not None and index <= newest:
            held.setdefault(index, []).append(lines)
            continue
        out.extend((i, b"".join(parts)) for i, parts in held.items())
        held = {}
        newest = index
        out.append((index, lines))
    out.extend((i, b"".join(parts)) for i, parts in held.items())
    return out


def _json_lines(
    head: bytes,
    f: IO[bytes],
    tick: float,
    stats: TraceStats,
    ts_field: str,
    start: float | None,
    end: float | None,
    source: str,
) -> Iterator[Batch]:
    cur: int | None = None
    dbs: dict[int, tuple[list[bytes], list[int]]] = {}

    def flush() -> Iterator[Batch]:
        if cur is None:
            return
        ts = (cur + 0.5) * tick
        if (start is not None and ts < start) or (end is not None and ts >= end):
            return
        for db, (ks, cs) in sorted(dbs.items()):
            if ks:
                stats.saw(ts)
                yield Batch(keys=ks, counts=cs, ts=ts, db=db, source=source)

    carry = b""
    buf = head
    while buf or carry:
        data = carry + buf
        lines = data.split(b"\n")
        carry = lines.pop() if buf else b""
        for line in lines:
            if not line.strip():
                continue
            got = _json_event(line, ts_field)
            if got is None:
                stats.malformed += 1
                continue
            ts, key, n, db = got
            index = math.floor(ts / tick + 1e-9)
            if index != cur:
                yield from flush()
                cur = index
                dbs = {}
            ks, cs = dbs.setdefault(db, ([], []))
            ks.append(key)
            cs.append(n)
            stats.lines_events += n
        if not buf:
            break
        buf = f.read(_CHUNK)
    yield from flush()


def _json_event(line: bytes, ts_field: str) -> tuple[float, bytes, int, int] | None:
    try:
        doc = strictjson.loads(line)
    except strictjson.JSONRejected:
        return None
    if not isinstance(doc, dict):
        return None
    ts, key, n, db = doc.get(ts_field), doc.get("key"), doc.get("count", 1), doc.get("db", 0)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        return None
    if not isinstance(key, str) or not key:
        return None
    if type(n) is not int or not 0 < n <= COUNT_MAX or type(db) is not int or db < 0:
        return None
    if doc.get("enc") == "base64":
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            return None
    else:
        raw = key.encode("utf-8", "surrogatepass")
    return (ts / 1000.0 if ts > 1e11 else float(ts)), raw, n, db
