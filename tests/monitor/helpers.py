"""Helpers of the MONITOR tests: format MONITOR lines exactly as Redis does."""

from __future__ import annotations

try:
    from hotkeyd import _monitor as _monitor_c
except ImportError:  # pragma: no cover - CI builds the extension
    _monitor_c = None

__all__ = ["_monitor_c", "monitor_line", "sdscatrepr"]


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
