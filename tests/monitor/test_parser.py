"""The streaming parser: exact argument boundaries, partial lines, C == twin."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.sources.monitor import _monitor_py

from .helpers import _monitor_c, monitor_line, sdscatrepr

ARGS = st.lists(st.binary(max_size=40), min_size=1, max_size=8)


def test_sdscatrepr_escape_set() -> None:
    # the exact set Redis uses: \\ \" \n \r \t \a \b, printable as is, else \xHH lowercase
    assert sdscatrepr(b'a"b\\c\n\r\t\x07\x08\x00\xff ~') == (
        b'"a\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff ~"'
    )


def test_args_with_spaces_quotes_and_binary(impl: ModuleType) -> None:
    args = [b"SET", b'a key "with" spaces', b"\x00\xff\r\n\\x41", b""]
    lines, replies, bad, long_ = impl.Parser().feed_args(monitor_line(args, db=3))
    assert (bad, long_, replies) == (0, 0, [])
    assert lines == [(1700000000.123456, 3, b"127.0.0.1:5555", args)]


def test_unescapes_every_escape(impl: ModuleType) -> None:
    line = b'+1.5 [0 1.2.3.4:5] "\\"\\\\\\n\\r\\t\\a\\b\\x41\\xfF\\q\\xZZ"\r\n'
    lines, *_ = impl.Parser().feed_args(line)
    assert lines[0][3] == [b'"\\\n\r\t\x07\x08A\xffqxZZ']


def test_ipv6_unix_and_lua_addresses(impl: ModuleType) -> None:
    data = (
        b'+1.0 [0 [::1]:6000] "GET" "a"\r\n'
        b'+1.0 [1 unix:/tmp/r.sock] "GET" "b"\r\n'
        b'+1.0 [2 lua] "GET" "c"\r\n'
    )
    lines, *_ = impl.Parser().feed_args(data)
    assert [(db, addr) for _, db, addr, _ in lines] == [
        (0, b"[::1]:6000"),
        (1, b"unix:/tmp/r.sock"),
        (2, b"lua"),
    ]


def test_status_and_error_replies_are_not_lines(impl: ModuleType) -> None:
    data = b"+OK\r\n-NOPERM no\r\n+RESET\r\n" + monitor_line([b"GET", b"k"])
    lines, replies, bad, _ = impl.Parser().feed_args(data)
    assert replies == [b"+OK", b"-NOPERM no", b"+RESET"]
    assert len(lines) == 1 and bad == 0


@pytest.mark.parametrize(
    "line",
    [
        b'+1.5 [0 a:1] "GET" "unterminated\r\n',
        b"+1.5 [0 a:1] GET\r\n",
        b'+1.5 [x a:1] "GET"\r\n',
        b'+1.5 [0 a:1] "GET""k"\r\n',
        b'+1.5 [0 a:1] "GET" \r\n',
        b"*3\r\n",
        b"\r\n",
    ],
)
def test_malformed_lines_are_counted_not_fatal(impl: ModuleType, line: bytes) -> None:
    p = impl.Parser()
    lines, _replies, bad, _ = p.feed_args(line + monitor_line([b"GET", b"ok"]))
    assert bad == 1
    assert [a for *_, a in lines] == [[b"GET", b"ok"]]


def test_every_split_point_gives_the_same_result(impl: ModuleType) -> None:
    data = monitor_line([b"SET", b'k "1"', b"\x00v"]) + monitor_line([b"GET", b"k2"], db=5)
    whole = impl.Parser().feed_args(data)[0]
    for cut in range(len(data) + 1):
        p = impl.Parser()
        got = p.feed_args(data[:cut])[0] + p.feed_args(data[cut:])[0]
        assert got == whole, cut
        assert p.pending == 0


def test_too_long_lines_dropped_and_counted(impl: ModuleType) -> None:
    p = impl.Parser(max_line=100)
    big = monitor_line([b"SET", b"k", b"v" * 200])
    ok = monitor_line([b"GET", b"small"])
    # whole, and split so that the long line spans feeds
    lines, _, _, long1 = p.feed_args(big + ok)
    assert long1 == 1 and [a for *_, a in lines] == [[b"GET", b"small"]]
    r1 = p.feed_args(big[:50])
    r2 = p.feed_args(big[50:150])
    r3 = p.feed_args(big[150:] + ok)
    assert r1[3] + r2[3] + r3[3] == 1
    assert [a for *_, a in r3[0]] == [[b"GET", b"small"]]
    assert p.pending == 0


def test_skip_own_address_and_scripts(impl: ModuleType, table: Any) -> None:
    p = impl.Parser(table)
    p.set_skip([b"10.0.0.1:7"])
    data = (
        monitor_line([b"GET", b"mine"], addr=b"10.0.0.1:7")
        + monitor_line([b"GET", b"script"], addr=b"lua")
        + monitor_line([b"GET", b"app"], addr=b"10.0.0.1:8")
    )
    groups, _, n_mon, n_skip, *_ = p.feed(data)
    assert groups == {0: [b"app"]}
    assert (n_mon, n_skip) == (3, 2)
    groups = impl.Parser(table, skip_scripts=False).feed(data)[0]
    assert groups == {0: [b"mine", b"script", b"app"]}


def test_feed_reports_timestamps_and_unknown_commands(impl: ModuleType, table: Any) -> None:
    data = monitor_line([b"NOSUCHCMD", b"x"], ts=b"5.25") + monitor_line([b"GET", b"k"], ts=b"6.5")
    groups, _, n_mon, _, bad, _, unknown, ts0, ts1 = impl.Parser(table).feed(data)
    assert (groups, n_mon, bad, unknown, ts0, ts1) == ({0: [b"k"]}, 2, 0, 1, 5.25, 6.5)


def test_wrong_types(impl: ModuleType) -> None:
    with pytest.raises(TypeError):
        impl.Parser().feed("text")
    with pytest.raises(TypeError):
        impl.Table([("get", "0", [])])
    with pytest.raises(TypeError):
        impl.Table([("get", 0, [(1, 1)])])
    with pytest.raises(ValueError):
        impl.Table([("get", 0, [(7, 1, None, 1, 0, 1, 0, False)])])
    with pytest.raises(ValueError):
        impl.Parser(max_line=1)


@given(
    arglists=st.lists(ARGS, min_size=1, max_size=5),
    dbs=st.lists(st.integers(0, 15), min_size=5, max_size=5),
)
@settings(max_examples=300, deadline=None)
def test_roundtrip_random_args(arglists: list[list[bytes]], dbs: list[int]) -> None:
    data = b"".join(monitor_line(a, db=dbs[i]) for i, a in enumerate(arglists))
    want = [(1700000000.123456, dbs[i], b"127.0.0.1:5555", a) for i, a in enumerate(arglists)]
    assert _monitor_py.Parser().feed_args(data)[0] == want
    if _monitor_c is not None:
        assert _monitor_c.Parser().feed_args(data)[0] == want


@pytest.mark.skipif(_monitor_c is None, reason="C parser not built")
@given(chunks=st.lists(st.binary(max_size=60), max_size=8), alphabet_bias=st.booleans())
@settings(max_examples=400, deadline=None)
def test_c_and_twin_agree_on_garbage(chunks: list[bytes], alphabet_bias: bool) -> None:
    if alphabet_bias:  # make the garbage look like MONITOR output more often
        chunks = [
            c.replace(b"\x01", b'"')
            .replace(b"\x02", b"\\")
            .replace(b"\x03", b"\r\n")
            .replace(b"\x04", b"+1.5 [0 a:1] ")
            for c in chunks
        ]
    assert _monitor_c is not None
    c, py = _monitor_c.Parser(max_line=64), _monitor_py.Parser(max_line=64)
    for chunk in chunks:
        assert c.feed_args(chunk) == py.feed_args(chunk)
        assert c.pending == py.pending


def test_the_c_module_uses_multi_phase_init() -> None:
    """PEP 489: the import system creates each module object, so a second one can be made."""
    import importlib.util

    from hotkeyd.sources.monitor import _monitor

    spec = _monitor.__spec__
    assert spec is not None and spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    # created empty, filled by its exec slot (a single-phase module comes back filled)
    assert not hasattr(again, "Table")
    spec.loader.exec_module(again)
    assert again is not _monitor
    assert again.Table is _monitor.Table and again.Parser is _monitor.Parser
