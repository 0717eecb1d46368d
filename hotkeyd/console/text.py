"""Text rendering: the ``top`` table and ``watch``'s one line per event.

Everything shown comes from the wire or another process, so it is untrusted: every string
goes through :func:`safe_text` (control characters, terminal escape sequences and bidi
overrides become visible escapes, so a forged instance or rule name cannot drive the
operator's terminal) and every number through :func:`_num` (a wrong type renders as
``?``, never a traceback).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from hotkeyd.protocol.wire import Message, WireError, decode_key

__all__ = ["demand_summary", "format_message", "render_top", "safe_text", "show_key"]


def safe_text(value: object, width: int | None = None) -> str:
    """``value`` as one printable line: non-printable characters (ESC, other C0/C1
    controls, bidi and other format characters, line breaks) escaped as ``\\x1b`` etc."""
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if width is not None and len(text) > width:
        text = text[: width - 3] + "..."
    return text


def show_key(key: bytes, width: int = 60) -> str:
    """A key as one printable line: invalid UTF-8 and control bytes escaped once."""
    return safe_text(key, width)


def _num(v: object) -> float:
    """A number from untrusted data; NaN when it is not one (rendered as ``nan``)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return math.nan
    try:
        return float(v)
    except (ValueError, OverflowError):
        return math.nan


def _key(e: dict[str, Any]) -> str:
    try:
        return show_key(decode_key(e))
    except WireError:
        return "?" + safe_text(e.get("key", ""), 58)


def _since(since: object, now: float) -> str:
    since = _num(since)
    if not since or not math.isfinite(since):
        return "-"
    secs = max(0.0, now - since)
    return f"{secs:.1f}s ago" if secs < 120 else f"{secs / 60:.1f}m ago"


def _ident(e: dict[str, Any]) -> tuple[Any, Any, Any]:
    return e.get("key"), e.get("enc"), e.get("db", 0)


def _local_pct(rate: float, local: float) -> str:
    return f"{min(100.0, 100.0 * local / rate):.0f}%" if rate > 0 else "-"


def demand_summary(data: dict[str, Any]) -> tuple[float, float]:
    """``(total demand, served by app caches)`` in reads/s over the ``top`` entries.

    A key's ``rate`` is its total demand: what the daemon saw reach Redis plus what app
    caches reported serving locally (``local``, from demand reports).
    """
    top = [e for e in _list(data.get("top")) if isinstance(e, dict)]
    rates = [(_num(e.get("rate", 0.0)), _num(e.get("local", 0.0))) for e in top]
    rates = [(r, lo) for r, lo in rates if math.isfinite(r) and math.isfinite(lo)]
    return sum(r for r, _ in rates), sum(min(lo, r) for r, lo in rates)


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def render_top(data: dict[str, Any], limit: int, *, now: float | None = None) -> str:
    """The ``top`` table: hot keys first (marked ``*``), then the rest by rate.

    ``data`` is what ``/topk`` serves or :func:`hotkeyd.console.top.TopReader.read`
    returns: ``hot`` and ``top`` lists of wire entries, and ``instances``. ``RATE/s`` is
    a key's total demand at the last tick (from ``top``; a hot key's announced rate when
    it is not among the top entries) and ``LOCAL%`` the share of it app caches served
    locally (demand reports).
    """
    now = time.time() if now is None else now
    hot = [e for e in _list(data.get("hot")) if isinstance(e, dict)]
    top = [e for e in _list(data.get("top")) if isinstance(e, dict)]
    total, local = demand_summary(data)
    instances = ", ".join(safe_text(i, 80) for i in _list(data.get("instances")))
    lines = [
        f"hot keys: {len(hot)}   instances: {instances or '-'}   "
        f"demand: {total:.1f}/s, {_local_pct(total, local)} served from app caches",
        "",
    ]
    lines.append(
        f"{'KEY':<60} {'RATE/s':>12} {'LOCAL%':>6} {'RULE':<16} {'KIND':<6} {'HOT SINCE':<12}"
    )
    tops = {_ident(e): e for e in top}
    seen = {_ident(e) for e in hot}
    rows = [(e, tops.get(_ident(e), e), True) for e in hot]
    rows += [(e, e, False) for e in top if _ident(e) not in seen]
    rows.sort(key=lambda r: (not r[2], -(_num(r[1].get("rate", 0.0)) or 0.0)))
    for e, t, is_hot in rows[:limit]:
        mark = "*" if is_hot else " "
        rate = _num(t.get("rate", 0))
        pct = _local_pct(rate, _num(t["local"])) if "local" in t else "-"
        lines.append(
            f"{mark}{_key(e):<59} {rate:>12.1f} {pct:>6} "
            f"{safe_text(e.get('rule', ''), 16):<16} {safe_text(e.get('kind') or '-', 6):<6} "
            f"{_since(e.get('since') if is_hot else None, now):<12}"
        )
    lines += ["", "* = hot now; LOCAL% = share of the rate served from app caches"]
    return "\n".join(lines)


def format_message(msg: Message) -> list[str]:
    """One line per hot and cool entry of a notification (``watch``'s view)."""
    try:
        stamp = time.strftime("%H:%M:%S", time.localtime(msg.ts))
        stamp += f".{int(msg.ts * 1000) % 1000:03d}"
    except (OverflowError, OSError, ValueError):  # a ts no calendar holds (forged: 1e18)
        stamp = f"ts={msg.ts:g}"
    tags = [t for t, on in (("full", msg.full), ("final", msg.final)) if on]
    head = f"{stamp} {safe_text(msg.instance, 80)} #{msg.seq}" + (
        f" [{','.join(tags)}]" if tags else ""
    )
    lines = [
        f"{head} HOT  {show_key(h.key)} rate={h.rate:.1f}/s rule={safe_text(h.rule, 80)} "
        f"ttl={h.ttl_ms}ms" + (f" kind={h.kind}" if h.kind else "")
        for h in msg.hot
    ]
    lines += [f"{head} COOL {show_key(c.key)} rule={safe_text(c.rule, 80)}" for c in msg.cool]
    return lines or [f"{head} (no changes)"]


def watch_lines(data: bytes | str, *, as_json: bool) -> tuple[str, bool]:
    """What ``hotkeyd watch`` prints for one channel message: ``(text, is_error)``.

    With ``as_json`` the message is re-encoded (ASCII, escapes visible), so raw bytes from
    the wire never reach the terminal; otherwise it is rendered by :func:`format_message`.
    Anything malformed is one sanitized error line, never a traceback.
    """
    if as_json:
        try:
            return json.dumps(json.loads(data), separators=(",", ":")), False
        except Exception as exc:  # not JSON, nested too deeply, ...
            return f"! malformed message: {safe_text(exc, 200)}", True
    try:
        return "\n".join(format_message(Message.loads(data))), False
    except WireError as exc:
        return f"! malformed message: {safe_text(exc, 200)}", True
