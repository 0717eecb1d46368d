"""JSON of untrusted senders, parsed by the rule every decoder of the contract follows.

One rule for every message of ``spec/`` (notifications, snapshots, invalidations, demand
reports, Kafka JSON records, trace lines), in every language (``spec/README.md``,
"Hostile input"; vectors: ``spec/vectors/hostile.json``). A document is rejected whole
when it holds:

- an integer literal outside the signed 64-bit range (a 400-digit ``ts`` or ``count``);
- a number that is not finite as an IEEE double (``1e400``) or the non-JSON tokens
  ``NaN``, ``Infinity``, ``-Infinity``;
- bytes that are not UTF-8 (no replacement characters);
- arrays and objects nested deeper than :data:`MAX_DEPTH`.

Each field's own range (``seq``, ``ts``...) is checked afterwards by its decoder. A number
that passes here always converts to a float, so no ``OverflowError`` can escape a decoder.
"""

from __future__ import annotations

import json
from typing import Any

from hotkeyd.errors import HotkeydError
from hotkeyd.protocol import limits

__all__ = ["MAX_DEPTH", "MAX_INT", "MIN_INT", "JSONRejected", "loads"]

MAX_INT = (1 << 63) - 1
MIN_INT = -(1 << 63)
MAX_DEPTH = limits.JSON_DEPTH_MAX
"""Deepest nesting of arrays and objects a message may have (the contract needs 4)."""
_MAX_DIGITS = 20  # "-9223372036854775808" has 20 characters


class JSONRejected(HotkeydError, ValueError):
    """The document breaks the rule above (or is not JSON at all)."""


def _int(s: str) -> int:
    if len(s) > _MAX_DIGITS:
        raise JSONRejected(f"integer of {len(s)} digits")
    v = int(s)
    if not MIN_INT <= v <= MAX_INT:
        raise JSONRejected("integer outside the signed 64-bit range")
    return v


def _float(s: str) -> float:
    v = float(s)
    if v in (float("inf"), float("-inf")):
        raise JSONRejected(f"number {s[:40]} is not finite")
    return v


def _constant(s: str) -> Any:
    raise JSONRejected(f"{s} is not JSON")


_decoder = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def _depth_over(obj: Any, limit: int) -> bool:
    """True when containers in ``obj`` nest deeper than ``limit`` (iterative walk)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return True
        children = o.values() if isinstance(o, dict) else o
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse ``data`` by the rule above; :class:`JSONRejected` for anything it rejects.

    Never raises anything else, whatever ``data`` holds.
    """
    try:
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        obj, end = _decoder.raw_decode(text, len(text) - len(text.lstrip(" \t\n\r")))
        if text[end:].strip(" \t\n\r"):
            raise JSONRejected("extra data after the JSON value")
        deep = isinstance(obj, (dict, list)) and text.count("[") + text.count("{") > MAX_DEPTH
        if deep and _depth_over(obj, MAX_DEPTH):
            raise JSONRejected(f"nested deeper than {MAX_DEPTH}")
        return obj
    except JSONRejected:
        raise
    except Exception as exc:  # ValueError, UnicodeError, RecursionError, MemoryError...
        raise JSONRejected(f"not JSON: {type(exc).__name__}: {exc}"[:200]) from None
