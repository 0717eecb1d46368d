"""Pure-Python twin of the C MONITOR parser (``hotkeyd.sources.monitor._monitor``).

Same classes, same results, byte for byte: it is the fallback when the C extension
did not build and the oracle the tests compare the C parser against. It is written
for clarity first; the C parser is much faster (``benchmarks/bench_monitor.py``,
results in docs/monitor.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Parser", "Table", "extract"]

BS_UNKNOWN, BS_INDEX, BS_KEYWORD = 0, 1, 2
FK_UNKNOWN, FK_RANGE, FK_KEYNUM = 0, 1, 2
SPECIAL_NONE, SPECIAL_SORT, SPECIAL_MIGRATE, SPECIAL_CONTAINER = 0, 1, 2, 3
MAX_NAME = 128

Spec = tuple[int, int, bytes | None, int, int, int, int, bool]

_HEADER = re.compile(rb"\+(\d{1,18})\.(\d{1,9}) \[(\d{1,9}) ")
_ESCAPES = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("a"): b"\a",
    ord("b"): b"\b",
}
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _to_bytes(v: bytes | str, what: str) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")


def _int(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{what} must be int, not {type(v).__name__}")
    if not -1_000_000 <= v <= 1_000_000:
        raise ValueError(f"{what} out of range: {v}")
    return v


class Table:
    """Command table: lower-case name -> (special, key specs)."""

    def __init__(self, entries: Iterable[tuple[bytes | str, int, Sequence[Spec]]]) -> None:
        self._cmds: dict[bytes, tuple[int, list[Spec]]] = {}
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) != 3:
                raise TypeError("a table entry must be a tuple (name, special, specs)")
            name = _to_bytes(entry[0], "name").lower()
            special = _int(entry[1], "special")
            specs = list(entry[2])
            if len(specs) > 32:
                raise ValueError("at most 32 key specs per command")
            checked = [self._check_spec(s) for s in specs]
            if not name or len(name) >= MAX_NAME:
                raise ValueError(f"command name empty or longer than {MAX_NAME - 1} bytes")
            self._cmds[name] = (special, checked)

    @staticmethod
    def _check_spec(s: Any) -> Spec:
        if not isinstance(s, tuple) or len(s) != 8:
            raise TypeError(
                "a key spec must be a tuple (bs_type, bs_arg, keyword, fk_type, a, b, c, write)"
            )
        bs, arg = _int(s[0], "bs_type"), _int(s[1], "bs_arg")
        kw = None if s[2] is None else _to_bytes(s[2], "keyword")
        fk = _int(s[3], "fk_type")
        a, b, c = _int(s[4], "a"), _int(s[5], "b"), _int(s[6], "c")
        if not (0 <= bs <= 2 and 0 <= fk <= 2):
            raise ValueError("bs_type and fk_type must be 0, 1 or 2")
        return (bs, arg, kw or None, fk, a, b, c, bool(s[7]))

    def __len__(self) -> int:
        return len(self._cmds)

    def lookup(self, name: bytes) -> tuple[int, list[Spec]] | None:
        return self._cmds.get(name)


def _count(s: bytes) -> int:
    if not s or len(s) > 18 or not s.isdigit():
        return -1
    return int(s)


def _spec_keys(s: Spec, argv: Sequence[bytes], out: list[tuple[bytes, bool]]) -> None:
    bs, bs_arg, kw, fk, a, b, c, write = s
    argc = len(argv)
    first = 0
    if bs == BS_INDEX:
        first = bs_arg
    elif bs == BS_KEYWORD:
        start = bs_arg if bs_arg > 0 else argc + bs_arg
        end = argc - 1 if bs_arg > 0 else 0
        i = start
        kwl = (kw or b"").lower()
        while i != end:
            if i >= argc or i < 1:
                break
            if argv[i].lower() == kwl:
                first = i + 1
                break
            i = i + 1 if start <= end else i - 1
        if not first:
            return
    else:
        return
    if first < 1:
        return
    if fk == FK_RANGE:
        if a >= 0:
            last = first + a
        elif c <= 0:
            last = argc + a
        else:
            # C division truncates toward zero
            q = abs(argc - first) // c
            last = first + ((q if argc - first >= 0 else -q) + a)
        step = b
    elif fk == FK_KEYNUM:
        ni = first + a
        if ni < 0 or ni >= argc:
            return
        nk = min(_count(argv[ni]), argc)
        if nk < 0:
            return
        first += b
        step = c
        if step < 1:
            return
        last = first + (nk - 1) * step
    else:
        return
    if step < 1:
        return
    i = first
    while i <= last:
        if i >= argc:
            break
        out.append((argv[i], write))
        i += step


def _sort_keys(argv: Sequence[bytes], out: list[tuple[bytes, bool]]) -> None:
    if len(argv) < 2:
        return
    out.append((argv[1], False))
    store = -1
    i = 2
    while i < len(argv):
        w = argv[i].lower()
        if w == b"store" and i + 1 < len(argv):
            store = i + 1
            i += 1
        elif w in (b"by", b"get"):
            i += 1
        elif w == b"limit":
            i += 2
        i += 1
    if store > 0:
        out.append((argv[store], True))


def _migrate_keys(argv: Sequence[bytes], out: list[tuple[bytes, bool]]) -> None:
    if len(argv) < 6:
        return
    if argv[3]:
        out.append((argv[3], True))
        return
    i = 6
    while i < len(argv):
        w = argv[i].lower()
        if w == b"auth":
            i += 1
        elif w == b"auth2":
            i += 2
        elif w == b"keys":
            out.extend((k, True) for k in argv[i + 1 :])
            break
        i += 1


def _extract(table: Table | None, argv: Sequence[bytes], out: list[tuple[bytes, bool]]) -> bool:
    """Append the keys of one command; False when the command is not in the table."""
    if not argv or table is None:
        return True
    name = argv[0]
    if not name or len(name) >= MAX_NAME:
        return False
    name = name.lower()
    cmd = table.lookup(name)
    if cmd is None:
        return False
    if cmd[0] == SPECIAL_CONTAINER:
        if len(argv) < 2 or len(name) + 1 + len(argv[1]) >= MAX_NAME:
            return True
        sub = table.lookup(name + b"|" + argv[1].lower())
        if sub is None:
            return True
        cmd = sub
    special, specs = cmd
    if special == SPECIAL_SORT:
        _sort_keys(argv, out)
    elif special == SPECIAL_MIGRATE:
        _migrate_keys(argv, out)
    else:
        for s in specs:
            _spec_keys(s, argv, out)
    return True


def extract(table: Table, args: Sequence[bytes]) -> list[tuple[bytes, bool]]:
    """Keys of one command as ``[(key, is_write), ...]``."""
    if not isinstance(table, Table):
        raise TypeError(f"table must be a Table, not {type(table).__name__}")
    for a in args:
        if not isinstance(a, bytes):
            raise TypeError(f"args must be bytes, not {type(a).__name__}")
    out: list[tuple[bytes, bool]] = []
    _extract(table, list(args), out)
    return out


def _unescape(body: bytes) -> bytes:
    """Undo sdscatrepr for the text between the quotes (which has a backslash)."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        j = body.find(b"\\", i)
        if j < 0:
            out += body[i:]
            break
        out += body[i:j]
        e = body[j + 1]
        i = j + 2
        if e in _ESCAPES:
            out += _ESCAPES[e]
        elif e == ord("x"):
            if i + 1 < n and body[i] in _HEX and body[i + 1] in _HEX:
                out.append(int(body[i : i + 2], 16))
                i += 2
            else:
                out.append(e)
        else:
            out.append(e)
    return bytes(out)


def _split_args(s: bytes, q: int) -> list[bytes] | None:
    """Parse ``"a" "b" ...`` from position q to the end; None when malformed."""
    args: list[bytes] = []
    n = len(s)
    while q < n:
        if s[q] != 0x22:  # '"'
            return None
        q += 1
        start = q
        has_escape = False
        while True:
            r1 = s.find(b'"', q)
            r2 = s.find(b"\\", q)
            if r1 < 0:
                return None
            if 0 <= r2 < r1:
                if r2 + 1 >= n:
                    return None
                has_escape = True
                q = r2 + 2
                continue
            q = r1
            break
        body = s[start:q]
        args.append(_unescape(body) if has_escape else body)
        q += 1
        if q < n:
            if s[q] != 0x20 or q + 1 >= n:
                return None
            q += 1
    return args or None


class Parser:
    """Streaming MONITOR parser (pure Python); API and results as the C one."""

    def __init__(
        self, table: Table | None = None, *, max_line: int = 64 << 20, skip_scripts: bool = True
    ) -> None:
        if max_line < 64:
            raise ValueError(f"max_line must be >= 64, got {max_line}")
        self._max_line = max_line
        self._skip_scripts = bool(skip_scripts)
        self._skip: frozenset[bytes] = frozenset()
        self._partial = bytearray()
        self._dropping = False
        self._table: Table | None = None
        self.set_table(table)

    @property
    def pending(self) -> int:
        return len(self._partial)

    def set_table(self, table: Table | None) -> None:
        if table is not None and not isinstance(table, Table):
            raise TypeError(f"table must be a Table or None, not {type(table).__name__}")
        self._table = table

    def set_skip(self, addrs: Sequence[bytes | str]) -> None:
        self._skip = frozenset(_to_bytes(a, "address") for a in addrs)

    def _lines(self, data: bytes, counters: list[int]) -> list[bytes]:
        """Split into complete lines, keeping the partial tail (counters[1] += too long)."""
        mv = bytes(data)
        lines: list[bytes] = []
        pos, n = 0, len(mv)
        while pos < n:
            nl = mv.find(b"\n", pos)
            if nl < 0:
                self._partial_put(mv[pos:], counters)
                break
            if self._dropping:
                self._dropping = False
            elif self._partial:
                self._partial_put(mv[pos:nl], counters)
                if self._dropping:
                    self._dropping = False
                else:
                    lines.append(bytes(self._partial))
                    self._partial = bytearray()
            else:
                lines.append(mv[pos:nl])
            pos = nl + 1
        out = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self._max_line:
                counters[1] += 1
                continue
            out.append(line)
        return out

    def _partial_put(self, chunk: bytes, counters: list[int]) -> None:
        if self._dropping:
            return
        if len(self._partial) + len(chunk) > self._max_line:
            self._dropping = True
            self._partial = bytearray()  # released, as the C parser releases large buffers
            counters[1] += 1
            return
        self._partial += chunk

    def _parse(
        self, line: bytes, counters: list[int], replies: list[bytes]
    ) -> tuple[float, int, bytes, list[bytes]] | None:
        """counters: [malformed, too_long]."""
        if not line:
            counters[0] += 1
            return None
        if line[0] == 0x2D:  # '-'
            replies.append(line)
            return None
        if line[0] != 0x2B:  # '+'
            counters[0] += 1
            return None
        if not re.match(rb"\+\d{1,18}\.\d", line):
            replies.append(line)
            return None
        m = _HEADER.match(line)
        if m is None:
            counters[0] += 1
            return None
        sec, frac, db = m.group(1), m.group(2), m.group(3)
        ts = int(sec) + int(frac) / 10 ** len(frac)
        q = m.end()
        ae = -1
        r = q
        while True:
            r = line.find(b"]", r)
            if r < 0 or r + 2 >= len(line):
                break
            if line[r + 1] == 0x20 and line[r + 2] == 0x22:
                ae = r
                break
            r += 1
        if ae < 0:
            counters[0] += 1
            return None
        args = _split_args(line, ae + 2)
        if args is None:
            counters[0] += 1
            return None
        return ts, int(db), line[q:ae], args

    def feed(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[dict[int, list[bytes]], list[bytes], int, int, int, int, int, float, float]:
        """Parse a chunk; see the C Parser.feed for the result tuple."""
        counters = [0, 0]
        replies: list[bytes] = []
        groups: dict[int, list[bytes]] = {}
        n_mon = n_skip = n_unknown = 0
        ts_first = ts_last = 0.0
        for line in self._lines(bytes(data), counters):
            rec = self._parse(line, counters, replies)
            if rec is None:
                continue
            ts, db, addr, args = rec
            n_mon += 1
            if ts_first == 0.0:
                ts_first = ts
            ts_last = max(ts_last, ts)
            if (self._skip_scripts and addr == b"lua") or addr in self._skip:
                n_skip += 1
                continue
            keys: list[tuple[bytes, bool]] = []
            if not _extract(self._table, args, keys):
                n_unknown += 1
            for k, w in keys:
                groups.setdefault(db * 2 + int(w), []).append(k)
        return (
            groups,
            replies,
            n_mon,
            n_skip,
            counters[0],
            counters[1],
            n_unknown,
            ts_first,
            ts_last,
        )

    def feed_args(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[list[tuple[float, int, bytes, list[bytes]]], list[bytes], int, int]:
        """Parse a chunk into ``(ts, db, addr, args)`` per MONITOR line."""
        counters = [0, 0]
        replies: list[bytes] = []
        lines = []
        for line in self._lines(bytes(data), counters):
            rec = self._parse(line, counters, replies)
            if rec is not None:
                lines.append(rec)
        return lines, replies, counters[0], counters[1]
