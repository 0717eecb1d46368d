"""Hostile MONITOR lines (issue 14): over-long lines are counted and skipped in bounded
memory, and the memory a large line needed is given back (C parser and its twin)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

from hotkeyd.sources.monitor import _monitor_py

try:
    from hotkeyd.sources.monitor import _monitor as _monitor_c
except ImportError:  # pragma: no cover - make test requires the C build
    _monitor_c = None  # type: ignore[assignment]

IMPLS = [_monitor_py] + ([_monitor_c] if _monitor_c is not None else [])


def _line(key: bytes, value: bytes) -> bytes:
    return b'+1764480000.000001 [0 127.0.0.1:5000] "SET" "' + key + b'" "' + value + b'"\r\n'


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_long_lines_skipped_and_counted_whole_or_in_pieces(impl: ModuleType) -> None:
    p = impl.Parser(max_line=1024)
    big = _line(b"big", b"\\x00" * 2000)
    data = _line(b"a", b"1") + big + _line(b"b", b"2") + b"garbage\x00\xff\r\n" + _line(b"c", b"3")
    got: list[bytes] = []
    too_long = 0
    for i in range(0, len(data), 97):  # split anywhere, also inside the long line
        lines, _, _, long_ = p.feed_args(data[i : i + 97])
        got += [args[1] for _, _, _, args in lines]
        too_long += long_
    assert got == [b"a", b"b", b"c"]
    assert too_long == 1


_RSS_PROBE = textwrap.dedent(
    """
    import sys
    from hotkeyd.sources.monitor import _monitor
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    p = _monitor.Parser(max_line=64 << 20)
    line = b'+1.0 [0 127.0.0.1:1] "SET" "k" "' + b"\\\\x00" * (10 << 20) + b'"\\r\\n'
    p.feed_args(b'+1.0 [0 127.0.0.1:1] "GET" "warm"\\r\\n')
    base = rss()
    for _ in range(3):
        for i in range(0, len(line), 1 << 20):
            p.feed_args(line[i : i + (1 << 20)])
    p.feed_args(b'+1.0 [0 127.0.0.1:1] "GET" "small"\\r\\n')
    del line
    print(rss() - base)
    """
)


@pytest.mark.skipif(_monitor_c is None, reason="C parser not built")
def test_c_parser_gives_memory_back_after_large_lines() -> None:
    """Three 40 MB lines: before the fix their buffers (~80 MB) stayed for good."""
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    grown = int(out.stdout.strip())
    assert grown < 16 << 20, f"RSS grew {grown / 2**20:.1f} MiB and stayed"
