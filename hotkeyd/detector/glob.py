"""Glob matching on bytes in linear-ish time, with Redis ``KEYS``-style syntax.

Syntax: ``*`` any run of bytes (including none), ``?`` exactly one byte,
``[abc]`` / ``[a-z]`` one byte of a set (``[!...]`` or ``[^...]`` negates; a ``]``
right after ``[`` or ``[!`` is literal), ``\\x`` the byte ``x`` literally.

Why not ``fnmatch`` or a translated regex: ``fnmatch.translate`` turns ``*`` into
``.*`` and a pattern such as ``*a*a*a*a*b`` then backtracks exponentially on a long
key without ``b``. Keys are untrusted, so the pattern is instead split at the stars
into fixed-width segments (no quantifiers inside) and matched greedily: the first
segment anchored at the start, the last at the end, each middle one at its leftmost
occurrence. For fixed-width segments the leftmost choice is always optimal, so the
whole match costs at most O(len(key) * len(pattern)) and never backtracks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hotkeyd.errors import ConfigError

__all__ = ["Glob", "GlobError"]

_MAX_PATTERN = 4096


class GlobError(ConfigError):
    """The glob pattern is malformed (unterminated ``[``, trailing ``\\``, too long)."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """A star-free run of single-byte tokens: a literal or a quantifier-free regex."""

    width: int
    literal: bytes | None
    regex: re.Pattern[bytes] | None

    def match_at(self, key: bytes, pos: int) -> bool:
        if self.literal is not None:
            return key.startswith(self.literal, pos)
        assert self.regex is not None
        return self.regex.match(key, pos) is not None

    def find(self, key: bytes, start: int, end: int) -> int:
        """Leftmost start >= ``start`` where the segment fits entirely before ``end``."""
        if self.literal is not None:
            return key.find(self.literal, start, end)
        assert self.regex is not None
        m = self.regex.search(key, start, end)
        return -1 if m is None else m.start()


def _esc(b: int) -> bytes:
    return b"\\x%02x" % b


def _parse_class(pat: bytes, i: int) -> tuple[bytes, int]:
    """Parse ``[...]`` starting after the ``[`` at ``i``; return (regex class, next index)."""
    n = len(pat)
    negate = i < n and pat[i] in b"!^"
    if negate:
        i += 1
    parts: list[bytes] = []
    first = True
    while True:
        if i >= n:
            raise GlobError("unterminated '[' character class")
        c = pat[i]
        if c == 0x5D and not first:  # ']'
            i += 1
            break
        first = False
        if c == 0x5C:  # backslash escapes inside a class too
            i += 1
            if i >= n:
                raise GlobError("pattern ends with a lone '\\'")
            c = pat[i]
        i += 1
        if i + 1 < n and pat[i] == 0x2D and pat[i + 1] != 0x5D:  # a range 'c-d'
            hi = pat[i + 1]
            i += 2
            if hi == 0x5C:
                if i >= n:
                    raise GlobError("pattern ends with a lone '\\'")
                hi = pat[i]
                i += 1
            lo, hi = min(c, hi), max(c, hi)
            parts.append(_esc(lo) + b"-" + _esc(hi))
        else:
            parts.append(_esc(c))
    return b"[" + (b"^" if negate else b"") + b"".join(parts) + b"]", i


def _segment(tokens: list[bytes | int]) -> _Segment:
    """Tokens are int (one literal byte) or bytes (a regex atom of width one)."""
    if all(isinstance(t, int) for t in tokens):
        return _Segment(len(tokens), bytes(t for t in tokens if isinstance(t, int)), None)
    src = b"".join(_esc(t) if isinstance(t, int) else t for t in tokens)
    return _Segment(len(tokens), None, re.compile(src, re.DOTALL))


class Glob:
    """A compiled bytes glob.

    Args:
        pattern: the glob, as bytes.

    Raises:
        GlobError: malformed pattern.
    """

    __slots__ = ("_segments", "_star", "pattern")

    def __init__(self, pattern: bytes) -> None:
        if not isinstance(pattern, bytes):
            raise TypeError(f"glob pattern must be bytes, got {type(pattern).__name__}")
        if len(pattern) > _MAX_PATTERN:
            raise GlobError(f"pattern is longer than {_MAX_PATTERN} bytes")
        self.pattern = pattern
        segments: list[list[bytes | int]] = [[]]
        i, n = 0, len(pattern)
        while i < n:
            c = pattern[i]
            if c == 0x2A:  # '*'
                if segments[-1] or len(segments) == 1:
                    segments.append([])
                i += 1
            elif c == 0x3F:  # '?'
                segments[-1].append(b".")
                i += 1
            elif c == 0x5B:  # '['
                cls, i = _parse_class(pattern, i + 1)
                segments[-1].append(cls)
            elif c == 0x5C:  # '\'
                if i + 1 >= n:
                    raise GlobError("pattern ends with a lone '\\'")
                segments[-1].append(pattern[i + 1])
                i += 2
            else:
                segments[-1].append(c)
                i += 1
        self._star = len(segments) > 1
        self._segments = tuple(_segment(s) for s in segments)

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"

    def match(self, key: bytes) -> bool:
        """Whether the whole of ``key`` matches the pattern."""
        segs = self._segments
        n = len(key)
        if not self._star:
            seg = segs[0]
            return seg.width == n and seg.match_at(key, 0)
        first, last = segs[0], segs[-1]
        if first.width + last.width > n:
            return False
        end = n - last.width
        if not first.match_at(key, 0) or not last.match_at(key, end):
            return False
        pos = first.width
        for seg in segs[1:-1]:
            at = seg.find(key, pos, end)
            if at < 0:
                return False
            pos = at + seg.width
        return True
