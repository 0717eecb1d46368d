"""Key positions of Redis commands, from the server's own command table.

The MONITOR tap fetches ``COMMAND INFO`` at connect and turns each command into
the entries the parser (C or twin) evaluates per line:
``(name, special, [(bs_type, bs_arg, keyword, fk_type, a, b, c, write), ...])``.

Why the server's table and not a hard-coded one: the server knows its own version,
its modules and renamed commands. Redis 7 describes keys with *key specs*
(begin_search index/keyword + find_keys range/keynum, with RO/RW/OW/RM flags), which
cover EVAL/FCALL numkeys, XREAD/XREADGROUP STREAMS, GEORADIUS STORE and friends
exactly. Older servers only give legacy ``(first, last, step)`` plus a ``write``
flag; that becomes one range spec, and the few commands with movable keys get specs
synthesized here. SORT (STORE may appear anywhere) and MIGRATE (key ``""`` + KEYS)
are special-cased in the parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hotkeyd.sources.monitor.parser import Table

__all__ = [
    "BS_INDEX",
    "BS_KEYWORD",
    "FK_KEYNUM",
    "FK_RANGE",
    "SPECIAL_CONTAINER",
    "SPECIAL_MIGRATE",
    "SPECIAL_SORT",
    "Entry",
    "Spec",
    "entries_from_command_reply",
    "table_from_command_reply",
]

BS_UNKNOWN, BS_INDEX, BS_KEYWORD = 0, 1, 2
FK_UNKNOWN, FK_RANGE, FK_KEYNUM = 0, 1, 2
SPECIAL_NONE, SPECIAL_SORT, SPECIAL_MIGRATE, SPECIAL_CONTAINER = 0, 1, 2, 3

Spec = tuple[int, int, bytes | None, int, int, int, int, bool]
Entry = tuple[bytes, int, list[Spec]]

# Key-spec flags that mean the key is written (RW: read-write, OW: overwrite,
# RM: remove; insert/update/delete describe the write).
_WRITE_FLAGS = frozenset({b"rw", b"ow", b"rm", b"insert", b"update", b"delete"})

_SPECIALS = {b"sort": SPECIAL_SORT, b"migrate": SPECIAL_MIGRATE}

# Legacy servers (no key specs): movable-key commands, as key specs.
_NUMKEYS_AT_2: Spec = (BS_INDEX, 2, None, FK_KEYNUM, 0, 1, 1, True)
_NUMKEYS_AT_2_RO: Spec = (BS_INDEX, 2, None, FK_KEYNUM, 0, 1, 1, False)
_LEGACY_MOVABLE: dict[bytes, list[Spec]] = {
    b"eval": [_NUMKEYS_AT_2],
    b"evalsha": [_NUMKEYS_AT_2],
    b"eval_ro": [_NUMKEYS_AT_2_RO],
    b"evalsha_ro": [_NUMKEYS_AT_2_RO],
    b"fcall": [_NUMKEYS_AT_2],
    b"fcall_ro": [_NUMKEYS_AT_2_RO],
    b"xread": [(BS_KEYWORD, 1, b"STREAMS", FK_RANGE, -1, 1, 2, False)],
    b"xreadgroup": [(BS_KEYWORD, 4, b"STREAMS", FK_RANGE, -1, 1, 2, False)],
    b"zunionstore": [(BS_INDEX, 1, None, FK_RANGE, 0, 1, 0, True), _NUMKEYS_AT_2_RO],
    b"zinterstore": [(BS_INDEX, 1, None, FK_RANGE, 0, 1, 0, True), _NUMKEYS_AT_2_RO],
    b"zdiffstore": [(BS_INDEX, 1, None, FK_RANGE, 0, 1, 0, True), _NUMKEYS_AT_2_RO],
    b"zunion": [(BS_INDEX, 1, None, FK_KEYNUM, 0, 1, 1, False)],
    b"zinter": [(BS_INDEX, 1, None, FK_KEYNUM, 0, 1, 1, False)],
    b"zdiff": [(BS_INDEX, 1, None, FK_KEYNUM, 0, 1, 1, False)],
    b"georadius": [
        (BS_INDEX, 1, None, FK_RANGE, 0, 1, 0, False),
        (BS_KEYWORD, 6, b"STORE", FK_RANGE, 0, 1, 0, True),
        (BS_KEYWORD, 6, b"STOREDIST", FK_RANGE, 0, 1, 0, True),
    ],
    b"georadiusbymember": [
        (BS_INDEX, 1, None, FK_RANGE, 0, 1, 0, False),
        (BS_KEYWORD, 5, b"STORE", FK_RANGE, 0, 1, 0, True),
        (BS_KEYWORD, 5, b"STOREDIST", FK_RANGE, 0, 1, 0, True),
    ],
}


def _b(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return str(v).encode()


def _pairs(v: Any) -> dict[bytes, Any]:
    """A RESP2 flat map ``[k1, v1, k2, v2, ...]`` (or a RESP3 dict) as a dict."""
    if isinstance(v, dict):
        return {_b(k).lower(): x for k, x in v.items()}
    if not isinstance(v, list):
        return {}
    return {_b(v[i]).lower(): v[i + 1] for i in range(0, len(v) - 1, 2)}


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _spec_flags(raw: Any) -> set[bytes]:
    return {_b(f).lower() for f in _pairs(raw).get(b"flags", []) or []}


def _spec(raw: Any) -> Spec:
    """One Redis 7 key spec; unknown shapes become (UNKNOWN, ...) and yield no keys."""
    d = _pairs(raw)
    flags = _spec_flags(raw)
    write = bool(flags & _WRITE_FLAGS)
    bs = _pairs(d.get(b"begin_search", []))
    bs_kind = _b(bs.get(b"type", b"")).lower()
    bs_spec = _pairs(bs.get(b"spec", []))
    bs_type, bs_arg, keyword = BS_UNKNOWN, 0, None
    if bs_kind == b"index":
        bs_type, bs_arg = BS_INDEX, _int(bs_spec.get(b"index"))
    elif bs_kind == b"keyword":
        bs_type, bs_arg = BS_KEYWORD, _int(bs_spec.get(b"startfrom"))
        keyword = _b(bs_spec.get(b"keyword", b"")) or None
        if keyword is None:
            bs_type = BS_UNKNOWN
    fk = _pairs(d.get(b"find_keys", []))
    fk_kind = _b(fk.get(b"type", b"")).lower()
    fk_spec = _pairs(fk.get(b"spec", []))
    fk_type, a, b, c = FK_UNKNOWN, 0, 0, 0
    if fk_kind == b"range":
        fk_type = FK_RANGE
        a, b, c = (_int(fk_spec.get(k)) for k in (b"lastkey", b"keystep", b"limit"))
    elif fk_kind == b"keynum":
        fk_type = FK_KEYNUM
        a, b, c = (_int(fk_spec.get(k)) for k in (b"keynumidx", b"firstkey", b"keystep"))
    return (bs_type, bs_arg, keyword, fk_type, a, b, c, write)


def _entry(info: list[Any], out: list[Entry]) -> None:
    """Append the entries of one command (and its subcommands) from COMMAND INFO."""
    if not isinstance(info, list) or len(info) < 6:
        return
    name = _b(info[0]).lower()
    flags = {_b(f).lower() for f in (info[2] or [])}
    first, last, step = _int(info[3]), _int(info[4]), _int(info[5])
    raw_specs = info[8] if len(info) > 8 and isinstance(info[8], list) else None
    subs = info[9] if len(info) > 9 and isinstance(info[9], list) else []
    special = _SPECIALS.get(name, SPECIAL_NONE)
    specs: list[Spec] = []
    if raw_specs:
        # A spec flagged not_key names no key: Redis 7 gives shard channels (SPUBLISH,
        # SSUBSCRIBE, SUNSUBSCRIBE) one for slot routing. Counting them would rate
        # hotkeyd's own channels (demand reports, events) as keys.
        specs = [_spec(s) for s in raw_specs if b"not_key" not in _spec_flags(s)]
    elif raw_specs is None and name in _LEGACY_MOVABLE:
        specs = list(_LEGACY_MOVABLE[name])
    elif first > 0 and step > 0:
        lastkey = last - first if last >= 0 else last
        specs = [(BS_INDEX, first, None, FK_RANGE, lastkey, step, 0, b"write" in flags)]
    if subs and not specs and special == SPECIAL_NONE:
        special = SPECIAL_CONTAINER
    out.append((name, special, specs))
    for sub in subs:
        _entry(sub, out)


def entries_from_command_reply(reply: Sequence[Any]) -> list[Entry]:
    """Turn a ``COMMAND`` / ``COMMAND INFO`` reply (RESP2, bytes) into table entries.

    Args:
        reply: the decoded reply: one list per command
            ``[name, arity, flags, first, last, step, (acl, tips, key_specs, subcommands)]``.

    Returns:
        ``(name, special, specs)`` per command and subcommand (``"object|freq"``).
    """
    out: list[Entry] = []
    for info in reply:
        if isinstance(info, list):
            _entry(info, out)
    return out


def table_from_command_reply(reply: Sequence[Any]) -> Any:
    """Build the parser's :class:`Table` (C or twin) from a COMMAND INFO reply."""
    return Table(entries_from_command_reply(reply))
