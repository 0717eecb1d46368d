"""Text rendering: the ``top`` table and ``watch``'s one line per event."""

from __future__ import annotations

import time
from typing import Any

from hotkeyd.wire import Message, decode_key

__all__ = ["format_message", "render_top", "show_key"]


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


def render_top(data: dict[str, Any], limit: int, *, now: float | None = None) -> str:
    """The ``top`` table: hot keys first (marked ``*``), then the rest by rate.

    ``data`` is what ``/topk`` serves or :func:`hotkeyd.console.top.TopReader.read`
    returns: ``hot`` and ``top`` lists of wire entries, and ``instances``.
    """
    now = time.time() if now is None else now
    hot = data.get("hot", [])
    lines = [f"hot keys: {len(hot)}   instances: {', '.join(data.get('instances', [])) or '-'}", ""]
    lines.append(f"{'KEY':<60} {'RATE/s':>12} {'RULE':<16} {'KIND':<6} {'HOT SINCE':<12}")
    seen = {(e.get("key"), e.get("db", 0)) for e in hot}
    rows = [(e, True) for e in hot]
    rows += [(e, False) for e in data.get("top", []) if (e.get("key"), e.get("db", 0)) not in seen]
    rows.sort(key=lambda r: (not r[1], -float(r[0].get("rate", 0.0))))
    for e, is_hot in rows[:limit]:
        mark = "*" if is_hot else " "
        lines.append(
            f"{mark}{show_key(decode_key(e)):<59} {float(e.get('rate', 0)):>12.1f} "
            f"{e.get('rule', '')!s:<16} {e.get('kind') or '-'!s:<6} "
            f"{_since(e.get('since') if is_hot else None, now):<12}"
        )
    lines += ["", "* = hot now"]
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
