"""The counted-line grammar: ``key<TAB>count``, one rule for every parser.

The C fast path (``native/lines.c``), the pure-Python sketch twin and the detector's
late-batch path all read counted lines this way: the count is the text after the
*last* TAB, one or more ASCII digits (leading zeros allowed, no sign, no spaces, no
underscores) worth at most ``2**32 - 1``; anything else makes the line malformed.
A trailing ``\\r`` is dropped before parsing, and empty lines are skipped.
"""

from __future__ import annotations

from hotkeyd.protocol import limits

__all__ = ["COUNT_MAX", "parse_counted"]

COUNT_MAX = limits.COUNT_MAX


def parse_counted(line: bytes) -> tuple[bytes, int] | None:
    """``(key, count)`` of one counted line (no newline, no ``\\r``), or None if malformed."""
    t = line.rfind(b"\t")
    field = line[t + 1 :]
    if t < 0 or not field or not field.isdigit():  # bytes.isdigit(): ASCII digits only
        return None
    digits = field.lstrip(b"0")
    if len(digits) > 10:
        return None
    n = int(digits) if digits else 0
    return (line[:t], n) if n <= COUNT_MAX else None
