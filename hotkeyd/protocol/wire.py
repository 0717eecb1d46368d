"""The wire format of hot-key notifications (version 1), shared by daemon and clients.

One JSON object per tick that has changes is published on the events channel
(default ``hotkeyd:events``)::

    {"v": 1, "instance": "web-7f3a", "seq": 42, "ts": 1764480000.123,
     "full": false, "final": false,
     "hot":  [{"key": "item:1", "rate": 12345.6, "rule": "default", "ttl_ms": 5000,
               "since": 1764479999.9, "db": 0, "kind": "read"}],
     "cool": [{"key": "aXRlbTox", "enc": "base64", "rule": "default"}]}

- ``seq`` increases by exactly 1 per message of one ``instance``; a gap means a lost
  message and a client resyncs from the snapshot.
- Keys are UTF-8 text when they decode as such; otherwise ``key`` is base64 and
  ``"enc": "base64"`` is present. Clients must always go through :func:`decode_key`.
- ``full: true`` means ``hot`` lists the instance's *whole* hot set (sent on start and
  after a Redis reconnect): keys of that instance not listed are no longer hot.
- ``final: true`` is the last message of an instance that is shutting down; entries
  stay valid until their ``ttl_ms`` runs out (another instance may take over).
- Hot keys are re-announced before their TTL runs out.

The snapshot of instance ``I`` is a JSON string at ``{<ns>}:snapshot:<I>`` (same shape as
a message with ``full: true``, plus ``top``: the top keys by rate) with a TTL refreshed by
the heartbeat; ``{<ns>}:instances`` is a sorted set of instance ids scored by last
heartbeat. The braces are a Redis Cluster hash tag: every snapshot and the index share
one slot, so the daemon's MULTI/EXEC works on a cluster too.
The JSON Schemas are ``spec/schema/*.json`` (shipped; see :mod:`hotkeyd.protocol.contract`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hotkeyd.errors import HotkeydError
from hotkeyd.protocol import limits, strictjson

__all__ = [
    "BASE64",
    "INSTANCE_MAX_AGE",
    "WIRE_VERSION",
    "CoolEntry",
    "HotEntry",
    "Message",
    "Namespace",
    "WireError",
    "decode_key",
    "encode_key",
]

WIRE_VERSION = 1
MAX_SEQ = limits.SEQ_MAX
"""Largest ``seq`` (a signed 64-bit integer, so every language can hold it)."""
MAX_TTL_MS = limits.TTL_MS_MAX
"""Largest ``ttl_ms`` on the wire (a day, the rules' cap); clients cap lower (``max_ttl``)."""
_MAX_NAME = limits.NAME_CHARS_MAX  # instance and rule names
_KINDS = (None, "read", "write", "mixed")

INSTANCE_MAX_AGE = float(limits.INSTANCE_MAX_AGE_S)
"""Seconds after its last heartbeat an instance counts as gone: readers skip it and the
daemons' heartbeats prune it from ``{<prefix>}:instances``."""


class WireError(HotkeydError, ValueError):
    """A notification does not follow the wire format."""


#: The one marker of a base64 key, written wherever a key may be binary: ``"enc"`` of
#: notifications, snapshots, demand reports, invalidations and Kafka records, and the
#: third element of a reporter batch entry. It is the word every JSON Schema in spec/
#: has (``"enc": {"enum": ["base64", ...]}``) and every client writes in those messages.
BASE64 = "base64"


def encode_key(key: bytes) -> dict[str, str]:
    """Return the JSON fields for ``key``: text when UTF-8, base64 otherwise."""
    try:
        return {"key": key.decode("utf-8")}
    except UnicodeDecodeError:
        return {"key": base64.b64encode(key).decode("ascii"), "enc": BASE64}


def decode_key(obj: dict[str, Any]) -> bytes:
    """Return the key bytes of an entry produced by :func:`encode_key`."""
    key = obj.get("key")
    if not isinstance(key, str):
        raise WireError("entry has no string 'key'")
    enc = obj.get("enc")
    if enc is None or enc == "utf-8":
        return key.encode("utf-8", "surrogatepass")
    if enc == BASE64:
        try:
            return base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise WireError(f"invalid base64 key: {exc}") from exc
    raise WireError(f"unknown key encoding {enc!r}")


def _int(obj: dict[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
    v = obj.get(name, default)
    if type(v) is not int or not lo <= v <= hi:  # bool is not an int here; no floats
        raise WireError(f"{name} must be an integer in [{lo}, {hi}], got {v!r:.40}")
    return v


def _num(obj: dict[str, Any], name: str, default: float | None = None) -> float:
    v = obj.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise WireError(f"{name} must be a finite number >= 0, got {v!r:.40}")
    return float(v)


def _name(obj: dict[str, Any], name: str, default: str | None = None) -> str:
    v = obj.get(name, default)
    if not isinstance(v, str) or len(v) > _MAX_NAME:
        raise WireError(f"{name} must be a string of at most {_MAX_NAME} characters")
    return v


@dataclass(frozen=True, slots=True)
class HotEntry:
    """A key that is hot (or still hot, when re-announced)."""

    key: bytes
    rate: float
    rule: str
    ttl_ms: int
    since: float = 0.0
    db: int = 0
    kind: str | None = None  # "read", "write" or "mixed" when the source can tell
    as_of: float | None = None  # event time the rate describes (Unix s)
    lag_ms: int | None = None  # how far that data was behind the wall clock when announced

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = encode_key(self.key)
        out.update(
            rate=round(self.rate, 3), rule=self.rule, ttl_ms=self.ttl_ms, since=round(self.since, 3)
        )
        if self.db:
            out["db"] = self.db
        if self.kind is not None:
            out["kind"] = self.kind
        if self.as_of is not None:
            out["as_of"] = round(self.as_of, 3)
        if self.lag_ms is not None:
            out["lag_ms"] = self.lag_ms
        return out

    @classmethod
    def from_json(cls, obj: Any) -> HotEntry:
        """Validate and build an entry; :class:`WireError` on anything off the format."""
        if not isinstance(obj, dict):
            raise WireError(f"hot entry is not an object: {type(obj).__name__}")
        kind = obj.get("kind")
        if kind not in _KINDS:
            raise WireError(f"kind must be read, write or mixed, got {kind!r:.40}")
        return cls(
            key=decode_key(obj),
            rate=_num(obj, "rate"),
            rule=_name(obj, "rule"),
            ttl_ms=_int(obj, "ttl_ms", 0, MAX_TTL_MS),
            since=_num(obj, "since", 0.0),
            db=_int(obj, "db", 0, limits.DB_MAX, 0),
            kind=kind,
            as_of=None if obj.get("as_of") is None else _num(obj, "as_of"),
            lag_ms=None if obj.get("lag_ms") is None else _int(obj, "lag_ms", 0, 1 << 53),
        )


@dataclass(frozen=True, slots=True)
class CoolEntry:
    """A key that stopped being hot."""

    key: bytes
    rule: str = ""
    db: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = encode_key(self.key)
        out["rule"] = self.rule
        if self.db:
            out["db"] = self.db
        return out

    @classmethod
    def from_json(cls, obj: Any) -> CoolEntry:
        """Validate and build an entry; :class:`WireError` on anything off the format."""
        if not isinstance(obj, dict):
            raise WireError(f"cool entry is not an object: {type(obj).__name__}")
        return cls(
            key=decode_key(obj),
            rule=_name(obj, "rule", ""),
            db=_int(obj, "db", 0, limits.DB_MAX, 0),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One notification on the events channel (or one snapshot)."""

    instance: str
    seq: int
    ts: float
    hot: tuple[HotEntry, ...] = ()
    cool: tuple[CoolEntry, ...] = ()
    full: bool = False
    final: bool = False
    top: tuple[dict[str, Any], ...] = field(default=())
    skipped: int = field(default=0, compare=False)  # bad entries left out by loads()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": WIRE_VERSION,
            "instance": self.instance,
            "seq": self.seq,
            "ts": round(self.ts, 3),
            "full": self.full,
            "final": self.final,
            "hot": [h.to_json() for h in self.hot],
            "cool": [c.to_json() for c in self.cool],
        }
        if self.top:
            out["top"] = list(self.top)
        return out

    def dumps(self) -> bytes:
        """Serialize to compact JSON bytes (what goes on the channel)."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def loads(cls, data: bytes | str, *, max_entries: int | None = None) -> Message:
        """Parse and validate a notification or snapshot. Never raises anything else than
        :class:`WireError`, whatever ``data`` holds (deep nesting, ``Infinity``, huge
        numbers, wrong types).

        The envelope (``v``, ``instance``, ``seq``, ``ts``, ``full``, ``final``, the
        ``hot``/``cool`` lists) must be valid or the message is rejected. A bad *entry*
        is left out and counted in ``skipped``, as are entries beyond ``max_entries``.
        """
        try:
            obj = strictjson.loads(data)
        except strictjson.JSONRejected as exc:  # huge numbers, invalid UTF-8, nesting...
            raise WireError(f"notification rejected: {exc}"[:200]) from None
        if not isinstance(obj, dict):
            raise WireError("notification is not a JSON object")
        if obj.get("v") != WIRE_VERSION:
            raise WireError(
                f"unsupported wire version {obj.get('v')!r:.20} (this client speaks {WIRE_VERSION})"
            )
        instance = obj.get("instance")
        if not isinstance(instance, str) or not 0 < len(instance) <= _MAX_NAME:
            raise WireError(
                f"instance must be a non-empty string of at most {_MAX_NAME} characters"
            )
        seq = _int(obj, "seq", 0, MAX_SEQ)
        ts = _num(obj, "ts")
        flags = [obj.get("full", False), obj.get("final", False)]
        if not all(isinstance(f, bool) for f in flags):
            raise WireError("full and final must be true or false")
        lists = [obj.get("hot", []), obj.get("cool", []), obj.get("top", [])]
        if not all(isinstance(x, list) for x in lists):
            raise WireError("hot, cool and top must be lists")
        hot_raw, cool_raw, top_raw = lists
        skipped = 0
        if max_entries is not None and len(hot_raw) + len(cool_raw) > max_entries:
            skipped = len(hot_raw) + len(cool_raw) - max_entries
            hot_raw = hot_raw[:max_entries]
            cool_raw = cool_raw[: max_entries - len(hot_raw)]
        hot, bad_hot = _entries(hot_raw, HotEntry.from_json)
        cool, bad_cool = _entries(cool_raw, CoolEntry.from_json)
        skipped += bad_hot + bad_cool
        top = tuple(t for t in top_raw if isinstance(t, dict))
        skipped += len(top_raw) - len(top)
        return cls(
            instance=instance,
            seq=seq,
            ts=ts,
            hot=tuple(hot),
            cool=tuple(cool),
            full=flags[0],
            final=flags[1],
            top=top,
            skipped=skipped,
        )


_E = TypeVar("_E")


def _entries(raw: list[Any], parse: Callable[[Any], _E]) -> tuple[list[_E], int]:
    """The entries of ``raw`` that ``parse`` accepts, and how many it rejected."""
    out: list[_E] = []
    bad = 0
    for e in raw:
        try:
            out.append(parse(e))
        except WireError:
            bad += 1
    return out, bad


@dataclass(frozen=True, slots=True)
class Namespace:
    """Redis names used by one hotkeyd deployment (prefix ``hotkeyd`` by default).

    Keys carry the prefix as a Redis Cluster hash tag (``{hotkeyd}:instances``), so the
    snapshots and the instance index share one slot; channels are plain names.

    Attributes:
        prefix: the deployment's prefix (``--namespace``).
        channel_override: events channel instead of ``<prefix>:events`` (``--channel``).
        sharded: use sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis >= 7) for the channels:
            on a cluster a message then goes to the channel's shard only, not over the
            cluster bus to every node. Daemon and applications must agree.
    """

    prefix: str = "hotkeyd"
    channel_override: str | None = None
    sharded: bool = False

    @property
    def channel(self) -> str:
        return self.channel_override or f"{self.prefix}:events"

    @property
    def instances(self) -> str:
        return f"{{{self.prefix}}}:instances"

    def snapshot(self, instance: str) -> str:
        return f"{{{self.prefix}}}:snapshot:{instance}"

    @property
    def history(self) -> str:
        """The capped stream of hot/cool transitions (``hotkeyd.publish.history``)."""
        return f"{{{self.prefix}}}:history"

    @property
    def invalidate_channel(self) -> str:
        return f"{self.prefix}:invalidate"

    @property
    def watch_channel(self) -> str:
        """Where the daemon's watch of each data node sends its heartbeat (every 100 ms)."""
        return f"{self.prefix}:watch"

    def demand_channel(self, instance: str) -> str:
        """Where apps report the demand they served locally to daemon ``instance``."""
        return f"{self.prefix}:demand:{instance}"
