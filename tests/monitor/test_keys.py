"""Key extraction from the real server's command table (Redis 7 key specs)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from hotkeyd.sources.monitor.keyspec import entries_from_command_reply

R, W = False, True


def keys(impl: ModuleType, table: Any, *args: bytes | str) -> list[tuple[bytes, bool]]:
    return impl.extract(table, [a if isinstance(a, bytes) else a.encode() for a in args])


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["GET", "k"], [(b"k", R)]),
        (["get", "k"], [(b"k", R)]),
        (["SET", "k", "v"], [(b"k", W)]),
        (["INCR", "k"], [(b"k", W)]),
        (["MGET", "a", "b", "c"], [(b"a", R), (b"b", R), (b"c", R)]),
        (["MSET", "a", "1", "b", "2"], [(b"a", W), (b"b", W)]),
        (["HGET", "h", "f"], [(b"h", R)]),
        (["DEL", "a", "b"], [(b"a", W), (b"b", W)]),
        (["RENAME", "a", "b"], [(b"a", W), (b"b", W)]),
        (["LMOVE", "src", "dst", "LEFT", "RIGHT"], [(b"src", W), (b"dst", W)]),
        (["SINTERSTORE", "d", "s1", "s2"], [(b"d", W), (b"s1", R), (b"s2", R)]),
        # numkeys commands
        (["EVAL", "return 1", "2", "k1", "k2", "arg"], [(b"k1", W), (b"k2", W)]),
        (["EVALSHA", "abc", "1", "k1", "arg"], [(b"k1", W)]),
        (["EVAL_RO", "return 1", "1", "k1", "arg"], [(b"k1", R)]),
        (["EVALSHA_RO", "abc", "1", "k1"], [(b"k1", R)]),
        (["EVAL", "return 1", "0", "notakey"], []),
        (["FCALL", "f", "2", "k1", "k2", "a"], [(b"k1", W), (b"k2", W)]),
        (["FCALL_RO", "f", "1", "k1", "a"], [(b"k1", R)]),
        (
            ["ZUNIONSTORE", "d", "2", "z1", "z2", "WEIGHTS", "1", "2"],
            [(b"d", W), (b"z1", R), (b"z2", R)],
        ),
        (["ZUNION", "2", "z1", "z2"], [(b"z1", R), (b"z2", R)]),
        (["LMPOP", "2", "l1", "l2", "LEFT"], [(b"l1", W), (b"l2", W)]),
        # streams
        (["XREAD", "COUNT", "5", "STREAMS", "s1", "s2", "0", "0"], [(b"s1", R), (b"s2", R)]),
        (["XREAD", "STREAMS", "s1", "$"], [(b"s1", R)]),
        (
            ["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s1", "s2", ">", ">"],
            [(b"s1", R), (b"s2", R)],  # Redis 7.0 marks the streams RO (the PEL is not the key)
        ),
        (["XADD", "s", "*", "f", "v"], [(b"s", W)]),
        # MIGRATE: one key, or "" + KEYS
        (["MIGRATE", "h", "6379", "k", "0", "100"], [(b"k", W)]),
        (
            [
                "MIGRATE",
                "h",
                "6379",
                "",
                "0",
                "100",
                "COPY",
                "AUTH2",
                "u",
                "KEYS",
                "KEYS",
                "k1",
                "k2",
            ],
            [(b"k1", W), (b"k2", W)],
        ),
        (["MIGRATE", "h", "6379", "", "0", "100", "KEYS", "a", "b"], [(b"a", W), (b"b", W)]),
        # SORT: the sort key is read, BY/GET are patterns, STORE dest is written
        (["SORT", "list"], [(b"list", R)]),
        (
            ["SORT", "list", "BY", "w_*", "GET", "o_*", "GET", "#", "STORE", "dst"],
            [(b"list", R), (b"dst", W)],
        ),
        (["SORT", "list", "LIMIT", "0", "10", "GET", "store", "ALPHA"], [(b"list", R)]),
        (["SORT_RO", "list", "BY", "w_*"], [(b"list", R)]),
        # GEORADIUS STORE
        (["GEORADIUS", "g", "0", "0", "1", "km", "STORE", "dst"], [(b"g", R), (b"dst", W)]),
        # container commands -> subcommand
        (["OBJECT", "FREQ", "k"], [(b"k", R)]),
        (["object", "encoding", "k"], [(b"k", R)]),
        (["MEMORY", "USAGE", "k"], [(b"k", R)]),
        (["XINFO", "STREAM", "s"], [(b"s", R)]),
        (["CONFIG", "GET", "maxmemory"], []),
        # no keys
        (["MULTI"], []),
        (["EXEC"], []),
        (["PING"], []),
        (["SELECT", "3"], []),
        (["INFO"], []),
        (["CLIENT", "LIST"], []),
        (["PUBLISH", "ch", "msg"], []),
        # shard channels have key specs (for slot routing) flagged not_key: not keys
        (["SPUBLISH", "hotkeyd:demand:d1", "msg"], []),
        (["SSUBSCRIBE", "a", "b"], []),
        (["SUNSUBSCRIBE", "a"], []),
        # too few args: no crash, no bogus key
        (["GET"], []),
        (["EVAL", "s", "5", "k1"], [(b"k1", W)]),
        (["EVAL", "s", "notanumber", "k1"], []),
        (["XREAD", "STREAMS"], []),
    ],
)
def test_command_keys(
    impl: ModuleType, table: Any, args: list[str], want: list[tuple[bytes, bool]]
) -> None:
    assert keys(impl, table, *args) == want


def test_binary_key_names(impl: ModuleType, table: Any) -> None:
    k = b'\x00 "sp ace"\\\xff'
    assert keys(impl, table, b"SET", k, b"v") == [(k, W)]


def test_legacy_table_without_key_specs(impl: ModuleType) -> None:
    # a Redis 5/6 COMMAND reply: [name, arity, flags, first, last, step(, acl)]
    reply = [
        [b"get", 2, [b"readonly"], 1, 1, 1],
        [b"set", -3, [b"write"], 1, 1, 1],
        [b"mset", -3, [b"write"], 1, -1, 2],
        [b"eval", -3, [b"noscript", b"movablekeys"], 0, 0, 0],
        [b"xread", -4, [b"readonly", b"movablekeys"], 0, 0, 0],
        [b"sort", -2, [b"write", b"movablekeys"], 1, 1, 1],
        [b"ping", -1, [b"stale"], 0, 0, 0],
    ]
    t = impl.Table(entries_from_command_reply(reply))
    assert keys(impl, t, "GET", "a") == [(b"a", R)]
    assert keys(impl, t, "MSET", "a", "1", "b", "2") == [(b"a", W), (b"b", W)]
    assert keys(impl, t, "EVAL", "s", "2", "x", "y", "z") == [(b"x", W), (b"y", W)]
    assert keys(impl, t, "XREAD", "STREAMS", "s1", "s2", "0", "0") == [(b"s1", R), (b"s2", R)]
    assert keys(impl, t, "SORT", "l", "STORE", "d") == [(b"l", R), (b"d", W)]
    assert keys(impl, t, "PING") == []
    assert keys(impl, t, "NOSUCH", "x") == []


def test_c_and_twin_tables_agree_on_every_command(command_reply: list[Any]) -> None:
    from hotkeyd.sources.monitor import _monitor_py

    from .helpers import _monitor_c

    if _monitor_c is None:
        pytest.skip("C parser not built")
    entries = entries_from_command_reply(command_reply)
    tc, tp = _monitor_c.Table(entries), _monitor_py.Table(entries)
    assert len(tc) == len(tp) == len({e[0] for e in entries})
    # every command with plausible argument shapes
    fillers = [b"k1", b"2", b"k2", b"k3", b"STREAMS", b"s1", b"s2", b"STORE", b"d", b"KEYS", b"x"]
    for name, _special, _specs in entries:
        parts = name.split(b"|")
        for n in range(len(fillers) + 1):
            args = [*parts, *fillers[:n]]
            assert _monitor_c.extract(tc, args) == _monitor_py.extract(tp, args), args
