"""Builds spec/vectors/limits.json from spec/limits.json: a case just under and just over
every limit a decoder enforces.

The vectors are data (every client reads the JSON); this script only writes them, so the
numbers in them cannot drift from spec/limits.json (tests/spec/test_limits.py rebuilds
and compares). Run ``python tests/spec/limit_vectors.py`` after changing a limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "spec" / "limits.json"
VECTORS = ROOT / "spec" / "vectors" / "limits.json"

START_MS = 1_000_000
NOW_S = 1_764_480_000.0


def _hot(key: str, **kw: Any) -> dict[str, Any]:
    return {"key": key, "rate": 100.0, "rule": "default", "ttl_ms": 5000, "since": NOW_S, **kw}


def _msg(seq: int = 1, *, full: bool = True, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "v": 1,
        "instance": "d1",
        "seq": seq,
        "ts": NOW_S,
        "full": full,
        "final": False,
        "hot": [],
        "cool": [],
    }
    out.update(kw)
    return out


def _one(limit: str, value: int, name: str, desc: str, step: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "limit": limit, "value": value, "description": desc, "steps": [step]}


def _hotset_cases(lim: dict[str, int]) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    ttl, name, db = lim["ttl_ms_max"], lim["name_chars_max"], lim["db_max"]
    for v, ok in ((ttl, True), (ttl + 1, False)):
        cases.append(
            _one(
                "ttl_ms_max",
                v,
                f"ttl_ms {v}",
                "An entry's ttl_ms at the limit applies; above it the entry is malformed.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a", ttl_ms=v)]),
                    "outcome": "applied",
                    "skipped": 0 if ok else 1,
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
    for n, ok in ((name, True), (name + 1, False)):
        cases.append(
            _one(
                "name_chars_max",
                n,
                f"rule of {n} characters",
                "A rule name at the limit applies; a longer one makes the entry malformed.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a", rule="r" * n)]),
                    "outcome": "applied",
                    "skipped": 0 if ok else 1,
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
        cases.append(
            _one(
                "name_chars_max",
                n,
                f"instance of {n} characters",
                "An instance name at the limit applies; a longer one rejects the message.",
                {
                    "op": "message",
                    "data": _msg(instance="i" * n, hot=[_hot("a")]),
                    "outcome": "applied" if ok else "bad",
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
    for v, ok in ((db, True), (db + 1, False)):
        cases.append(
            _one(
                "db_max",
                v,
                f"db {v}",
                "A db index at the limit applies; above it the entry is malformed.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a", db=v)]),
                    "outcome": "applied",
                    "skipped": 0 if ok else 1,
                    "hot": [{"key": "a", "db": v}] if ok else [],
                },
            )
        )
    seq = lim["seq_max"]
    for v, ok in ((seq, True), (seq + 1, False)):
        case = _one(
            "seq_max",
            v,
            f"seq {v}",
            "A seq at the limit applies; above it the message is malformed.",
            {
                "op": "message",
                "data": _msg(seq=v, hot=[_hot("a")]),
                "outcome": "applied" if ok else "bad",
                "hot": [{"key": "a"}] if ok else [],
            },
        )
        if not ok:
            case["skip"] = {
                "node": "JavaScript numbers cannot tell 2^63 from 2^63-1 (both parse to 2^63)"
            }
        cases.append(case)
    depth = lim["json_depth_max"]
    for v, ok in ((depth, True), (depth + 1, False)):
        nested: list[Any] = []  # the message is level 1, this array level 2
        for _ in range(v - 2):
            nested = [nested]
        cases.append(
            _one(
                "json_depth_max",
                v,
                f"nesting of {v}",
                "A document nested to the limit (in a field receivers ignore) applies; one "
                "level deeper and the whole message is malformed.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a")], pad=nested),
                    "outcome": "applied" if ok else "bad",
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
    entries = lim["message_entries_max"]
    for total, ok in ((entries, True), (entries + 1, False)):
        cases.append(
            _one(
                "message_entries_max",
                total,
                f"{total} entries in one message",
                "Entries up to the limit (hot plus cool) apply; those beyond are skipped.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a")], cool=[{"key": "z"}] * (total - 1)),
                    "outcome": "applied",
                    "skipped": 0 if ok else 1,
                    "hot": [{"key": "a"}],
                },
            )
        )
    size = lim["message_bytes_max"]
    for v, ok in ((size, True), (size + 1, False)):
        cases.append(
            _one(
                "message_bytes_max",
                v,
                f"message of {v} bytes",
                "pad_to: the runner appends spaces to the serialized data until it is that "
                "many bytes long. At the limit it applies; one byte more is dropped unparsed.",
                {
                    "op": "message",
                    "data": _msg(hot=[_hot("a")]),
                    "pad_to": v,
                    "outcome": "applied" if ok else "bad",
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
    skew = lim["clock_skew_s_max"]
    for v, ok in ((skew, True), (skew + 1, False)):
        cases.append(
            _one(
                "clock_skew_s_max",
                v,
                f"ts {v} s ahead",
                "A ts this far ahead of the wall clock (now_s) applies up to the limit; "
                "further ahead it is suspect.",
                {
                    "op": "message",
                    "data": _msg(ts=NOW_S + v, hot=[_hot("a")]),
                    "outcome": "applied" if ok else "suspect",
                    "hot": [{"key": "a"}] if ok else [],
                },
            )
        )
    jump = lim["seq_jump_max"]
    snap = _msg(seq=10, hot=[_hot("a")], top=[])
    for v, ok in ((jump, True), (jump + 1, False)):
        cases.append(
            {
                "name": f"seq {v} ahead of the snapshot",
                "limit": "seq_jump_max",
                "value": v,
                "description": "After the resync a message this far ahead of its instance's "
                "snapshot applies up to the limit; further ahead it is suspect.",
                "steps": [
                    {"op": "snapshot", "data": snap},
                    {"op": "bootstrap", "hot": [{"key": "a"}]},
                    {
                        "op": "message",
                        "data": _msg(seq=10 + v, full=False, hot=[_hot("b")]),
                        "outcome": "resynced" if ok else "suspect",
                        "hot": [{"key": "a"}, {"key": "b"}] if ok else [{"key": "a"}],
                    },
                ],
            }
        )
        cases.append(
            {
                "name": f"full message {v} ahead",
                "limit": "seq_jump_max",
                "value": v,
                "description": "A full message up to the limit ahead of what was applied "
                "applies at once; further ahead it is a gap (resync, then suspect).",
                "steps": [
                    {"op": "snapshot", "data": snap},
                    {"op": "bootstrap", "hot": [{"key": "a"}]},
                    {
                        "op": "message",
                        "data": _msg(seq=10 + v, hot=[_hot("b")]),
                        "outcome": "applied" if ok else "suspect",
                        "hot": [{"key": "b"}] if ok else [{"key": "a"}],
                    },
                ],
            }
        )
    cap = lim["hotset_ttl_ms_max"]
    for v in (cap, cap + 1):
        steps: list[dict[str, Any]] = [
            {
                "op": "message",
                "data": _msg(hot=[_hot("a", ttl_ms=v)]),
                "outcome": "applied",
                "hot": [{"key": "a"}],
            },
            {"op": "advance", "ms": cap - 1, "hot": [{"key": "a"}]},
            {"op": "advance", "ms": 1, "hot": []},
        ]
        cases.append(
            {
                "name": f"ttl_ms {v} in a default hot set",
                "limit": "hotset_ttl_ms_max",
                "value": v,
                "description": "A client with default bounds keeps a key hot at most the "
                "limit: a longer ttl_ms is cut to it.",
                "steps": steps,
            }
        )
    return cases


def _report(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "v": 1,
        "type": "demand",
        "app": "app-1",
        "seq": 0,
        "ts": NOW_S,
        "interval_ms": 250,
        "entries": [{"key": "a", "n": 1}],
    }
    out.update(kw)
    return out


def _demand_cases(lim: dict[str, int]) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []

    def pair(limit: str, label: str, build: Any) -> None:
        v = lim[limit]
        for value, ok in ((v, True), (v + 1, False)):
            case = {"name": label.format(value), "limit": limit, "value": value}
            case.update(build(value))
            case["error"] = not ok
            cases.append(case)

    pair("count_max", "n {}", lambda v: {"data": _report(entries=[{"key": "a", "n": v}])})
    pair("db_max", "db {}", lambda v: {"data": _report(entries=[{"key": "a", "n": 1, "db": v}])})
    pair("seq_max", "seq {}", lambda v: {"data": _report(seq=v)})
    pair("name_chars_max", "app of {} characters", lambda v: {"data": _report(app="x" * v)})
    pair("demand_interval_ms_max", "interval_ms {}", lambda v: {"data": _report(interval_ms=v)})
    pair(
        "demand_entries_max",
        "{} entries",
        lambda v: {"data": _report(entries=[{"key": "a", "n": 1}] * v)},
    )
    pair(
        "demand_report_bytes_max", "report of {} bytes", lambda v: {"data": _report(), "pad_to": v}
    )
    return cases


def build(limits: dict[str, Any]) -> dict[str, Any]:
    """The vectors for ``limits`` (the parsed spec/limits.json)."""
    lim = {name: spec["value"] for name, spec in limits["limits"].items()}
    count, key = lim["count_max"], lim["auth_key_bytes_min"]
    idem = lim["idempotency_key_chars_max"]
    return {
        "description": "A case just under and just over each limit of spec/limits.json that a "
        "decoder enforces; see spec/README.md (limits.json). Generated by "
        "tests/spec/limit_vectors.py: edit spec/limits.json, then rerun it.",
        "start_ms": START_MS,
        "now_s": NOW_S,
        "cases": _hotset_cases(lim),
        "demand": _demand_cases(lim),
        "counted_lines": [
            {"limit": "count_max", "value": count, "line": f"k\t{count}", "count": count},
            {"limit": "count_max", "value": count + 1, "line": f"k\t{count + 1}", "count": None},
        ],
        "auth": [
            {"limit": "auth_key_bytes_min", "value": key, "key_utf8": "k" * key, "error": False},
            {
                "limit": "auth_key_bytes_min",
                "value": key - 1,
                "key_utf8": "k" * (key - 1),
                "error": True,
            },
        ],
        "idempotency_keys": [
            {"limit": "idempotency_key_chars_max", "value": n, "key": "i" * n, "error": n > idem}
            for n in (idem, idem + 1)
        ],
    }


def render(limits: dict[str, Any]) -> str:
    """The file's text: one case per line (the long ones are long), so a diff names it."""

    def dump(obj: Any) -> str:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)

    parts = []
    for name, value in build(limits).items():
        if isinstance(value, list):
            rows = ",\n  ".join(dump(c) for c in value)
            parts.append(f"{dump(name)}: [\n  {rows}\n ]")
        else:
            parts.append(f"{dump(name)}: {dump(value)}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def main() -> int:
    VECTORS.write_text(render(json.loads(LIMITS.read_text(encoding="utf-8"))), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
