"""Text rendering: the ``top`` table and ``watch``'s one line per event."""

from __future__ import annotations

import time
from typing import Any

from hotkeyd.wire import Message, decode_key

__all__ = ["demand_summary", "format_message", "render_top", "show_key"]


def show_key(key: bytes, width: int = 60) -> str:
    """A key as one printable line: invalid UTF-8 and control bytes escaped once."""
    text = key.decode("utf-8", "backslashreplace")
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= width else text[: width - 3] + "..."


def _since(since: float | None, now: float) -> str:
    if not since:
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
    top = data.get("top", [])
    total = sum(float(e.get("rate", 0.0)) for e in top)
    local = sum(min(float(e.get("local", 0.0)), float(e.get("rate", 0.0))) for e in top)
    return total, local


def render_top(data: dict[str, Any], limit: int, *, now: float | None = None) -> str:
    """The ``top`` table: hot keys first (marked ``*``), then the rest by rate.

    ``data`` is what ``/topk`` serves or :func:`hotkeyd.console.top.TopReader.read`
    returns: ``hot`` and ``top`` lists of wire entries, and ``instances``. ``RATE/s`` is
    a key's total demand at the last tick (from ``top``; a hot key's announced rate when
    it is not among the top entries) and ``LOCAL%`` the share of it app caches served
    locally (demand reports).
    """
    now = time.time() if now is None else now
    hot = data.get("hot", [])
    total, local = demand_summary(data)
    lines = [
        f"hot keys: {len(hot)}   instances: {', '.join(data.get('instances', [])) or '-'}   "
        f"demand: {total:.1f}/s, {_local_pct(total, local)} served from app caches",
        "",
    ]
    lines.append(
        f"{'KEY':<60} {'RATE/s':>12} {'LOCAL%':>6} {'RULE':<16} {'KIND':<6} {'HOT SINCE':<12}"
    )
    tops = {_ident(e): e for e in data.get("top", [])}
    seen = {_ident(e) for e in hot}
    rows = [(e, tops.get(_ident(e), e), True) for e in hot]
    rows += [(e, e, False) for e in data.get("top", []) if _ident(e) not in seen]
    rows.sort(key=lambda r: (not r[2], -float(r[1].get("rate", 0.0))))
    for e, t, is_hot in rows[:limit]:
        mark = "*" if is_hot else " "
        rate = float(t.get("rate", 0))
        pct = _local_pct(rate, float(t["local"])) if "local" in t else "-"
        lines.append(
            f"{mark}{show_key(decode_key(e)):<59} {rate:>12.1f} {pct:>6} "
            f"{e.get('rule', '')!s:<16} {e.get('kind') or '-'!s:<6} "
            f"{_since(e.get('since') if is_hot else None, now):<12}"
        )
    lines += ["", "* = hot now; LOCAL% = share of the rate served from app caches"]
    return "\n".join(lines)


def format_message(msg: Message) -> list[str]:
    """One line per hot and cool entry of a notification (``watch``'s view)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(msg.ts)) + f".{int(msg.ts * 1000) % 1000:03d}"
    tags = [t for t, on in (("full", msg.full), ("final", msg.final)) if on]
    head = f"{stamp} {msg.instance} #{msg.seq}" + (f" [{','.join(tags)}]" if tags else "")
    lines = [
        f"{head} HOT  {show_key(h.key)} rate={h.rate:.1f}/s rule={h.rule} ttl={h.ttl_ms}ms"
        + (f" kind={h.kind}" if h.kind else "")
        for h in msg.hot
    ]
    lines += [f"{head} COOL {show_key(c.key)} rule={c.rule}" for c in msg.cool]
    return lines or [f"{head} (no changes)"]
