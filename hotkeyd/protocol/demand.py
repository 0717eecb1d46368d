"""The wire format of demand reports (version 1): apps tell the daemon what they served.

Why: once a key is hot, apps serve it from their local cache and Redis (and so the
daemon's MONITOR tap or Kafka reporter) stops seeing those reads. Without being told,
the daemon would measure a rate near zero, cool the key, and send the whole load back
to Redis until it turns hot again: a flap every few seconds. So every app instance
counts the reads it served locally per hot key and, every ``interval_ms`` (250 ms by
default, 250-500 allowed), PUBLISHes one message per daemon instance on
``<prefix>:demand:<instance>`` (see :meth:`hotkeyd.protocol.wire.Namespace.demand_channel`),
routed to the instance that most recently announced the key::

    {"v": 1, "type": "demand", "app": "web-1-3f2a9c01", "seq": 17, "ts": 1764480000.25,
     "interval_ms": 250,
     "entries": [{"key": "product:1", "n": 612},
                 {"key": "/w==", "enc": "base64", "db": 2, "n": 3}]}

- ``n`` (1 .. 2^32-1) is how many reads of the key the app served locally since its
  previous report; the daemon adds it to the same windows as the accesses it sees itself.
- At most :data:`MAX_ENTRIES` entries (the heaviest; the rest are counted as dropped by
  the sender) and :data:`MAX_REPORT_BYTES` (128 KiB) bytes per message.
- ``seq`` increases by 1 per report of one ``app``; ``ts`` is the sender's wall clock. The
  daemon drops a report it saw already (same app and seq), one older than
  :data:`MAX_AGE` or as far in the future, and demand above its per-app budget.
- Optionally signed with a **reporter key** (the HMAC envelope of
  :mod:`hotkeyd.protocol.auth`, a key of its own: apps never hold the daemon's signing
  key). A daemon given reporter keys discards unsigned reports before parsing them.
- Keys follow the notification rule (:func:`hotkeyd.protocol.wire.encode_key`); ``db`` is omitted
  when 0. Receivers ignore fields they do not know (v1 may gain optional fields).

The JSON Schema is ``spec/schema/demand-v1.json`` (``hotkeyd.protocol.contract.schema``). It sits in
:mod:`hotkeyd.protocol` because both halves use it (the client SDK sends, the daemon receives).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from hotkeyd.protocol import limits, strictjson
from hotkeyd.protocol.wire import WireError, decode_key, encode_key

__all__ = [
    "DEFAULT_INTERVAL",
    "DEMAND_KEY_ENV",
    "DEMAND_KEY_FILE_ENV",
    "DEMAND_VERSION",
    "MAX_AGE",
    "MAX_ENTRIES",
    "MAX_INTERVAL",
    "MAX_N",
    "MAX_REPORT_BYTES",
    "MIN_INTERVAL",
    "DemandEntry",
    "DemandError",
    "DemandReport",
]

DEMAND_VERSION = 1
MAX_ENTRIES = limits.DEMAND_ENTRIES_MAX
MAX_N = limits.COUNT_MAX
MAX_REPORT_BYTES = limits.DEMAND_REPORT_BYTES_MAX
"""Largest report (signature included): 1,000 entries of keys up to ~100 bytes fit."""
MIN_INTERVAL = limits.DEMAND_REPORT_INTERVAL_MS_MIN / 1000
MAX_INTERVAL = limits.DEMAND_REPORT_INTERVAL_MS_MAX / 1000
DEFAULT_INTERVAL = MIN_INTERVAL
DEMAND_KEY_ENV = "HOTKEYD_DEMAND_KEY"
"""Environment variable holding the reporter key (apps and daemon), when not in a file."""
DEMAND_KEY_FILE_ENV = "HOTKEYD_DEMAND_KEY_FILE"
"""Environment variable naming the reporter key file of an app."""
MAX_AGE = 2 * MAX_INTERVAL
"""Reports whose ``ts`` is older than this (s), or this far in the future, are stale."""
_MAX_APP_LEN = limits.NAME_CHARS_MAX
_MAX_INTERVAL_MS = limits.DEMAND_INTERVAL_MS_MAX


class DemandError(WireError):
    """A demand report does not follow the wire format.

    Attributes:
        reason: a short metric label (``oversized``, ``malformed``, ``version``,
            ``too_many_entries``, ``bad_entry``).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DemandEntry:
    """``n`` reads of ``key`` (in Redis database ``db``) served locally by one app."""

    key: bytes
    n: int
    db: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = encode_key(self.key)
        if self.db:
            out["db"] = self.db
        out["n"] = self.n
        return out


@dataclass(frozen=True, slots=True)
class DemandReport:
    """One demand report of one app instance to one daemon instance."""

    app: str
    seq: int
    ts: float
    interval_ms: int
    entries: tuple[DemandEntry, ...]

    @property
    def total(self) -> int:
        """Reads the report accounts for (sum of ``n``)."""
        return sum(e.n for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": DEMAND_VERSION,
            "type": "demand",
            "app": self.app,
            "seq": self.seq,
            "ts": round(self.ts, 3),
            "interval_ms": self.interval_ms,
            "entries": [e.to_json() for e in self.entries],
        }

    def dumps(self) -> bytes:
        """Serialize to compact JSON bytes (what goes on the channel)."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def loads(cls, data: bytes | str, *, max_bytes: int = MAX_REPORT_BYTES) -> DemandReport:
        """Parse and validate a report (untrusted input).

        Counts above :data:`MAX_N` are out of range and rejected with the message, as is
        anything the schema would reject; fields it does not know are ignored.

        Raises:
            DemandError: with a ``reason`` for the metric.
        """
        if len(data) > max_bytes:
            raise DemandError("oversized", f"report of {len(data)} bytes (limit {max_bytes})")
        try:
            obj = strictjson.loads(data)
        except strictjson.JSONRejected as exc:  # huge numbers, invalid UTF-8, nesting...
            raise DemandError("malformed", f"report rejected: {exc}") from None
        if not isinstance(obj, dict):
            raise DemandError("malformed", "report is not a JSON object")
        if obj.get("v") != DEMAND_VERSION:
            raise DemandError("version", f"unsupported demand report version {obj.get('v')!r}")
        if obj.get("type") != "demand":
            raise DemandError("malformed", f"type is {obj.get('type')!r}, not 'demand'")
        app = obj.get("app")
        if not isinstance(app, str) or not 0 < len(app) <= _MAX_APP_LEN:
            raise DemandError("malformed", f"app must be a string of 1-{_MAX_APP_LEN} characters")
        seq = _int(obj.get("seq"), 0, limits.SEQ_MAX, "seq")
        ts = obj.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise DemandError("malformed", f"ts must be a number, got {ts!r}")
        interval_ms = _int(obj.get("interval_ms"), 1, _MAX_INTERVAL_MS, "interval_ms")
        raw = obj.get("entries")
        if not isinstance(raw, list):
            raise DemandError("malformed", "entries must be an array")
        if len(raw) > MAX_ENTRIES:
            raise DemandError(
                "too_many_entries", f"{len(raw)} entries (limit {MAX_ENTRIES} per report)"
            )
        return cls(app, seq, float(ts), interval_ms, tuple(_entry(e) for e in raw))


def _int(v: Any, lo: int, hi: int, name: str, reason: str = "malformed") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise DemandError(reason, f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _entry(obj: Any) -> DemandEntry:
    if not isinstance(obj, dict):
        raise DemandError("bad_entry", "entry is not a JSON object")
    try:
        key = decode_key(obj)
    except WireError as exc:
        raise DemandError("bad_entry", str(exc)) from exc
    db = _int(obj.get("db", 0), 0, limits.DB_MAX, "db", "bad_entry")
    n = _int(obj.get("n"), 1, MAX_N, "n", "bad_entry")
    return DemandEntry(key, n, db)
