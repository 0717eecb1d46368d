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
The JSON Schemas are ``spec/schema/*.json`` (shipped; see :mod:`hotkeyd.contract`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from hotkeyd.errors import HotkeydError

__all__ = [
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

INSTANCE_MAX_AGE = 30.0
"""Seconds after its last heartbeat an instance counts as gone: readers skip it and the
daemons' heartbeats prune it from ``{<prefix>}:instances``."""


class WireError(HotkeydError, ValueError):
    """A notification does not follow the wire format."""


def encode_key(key: bytes) -> dict[str, str]:
    """Return the JSON fields for ``key``: text when UTF-8, base64 otherwise."""
    try:
        return {"key": key.decode("utf-8")}
    except UnicodeDecodeError:
        return {"key": base64.b64encode(key).decode("ascii"), "enc": "base64"}


def decode_key(obj: dict[str, Any]) -> bytes:
    """Return the key bytes of an entry produced by :func:`encode_key`."""
    key = obj.get("key")
    if not isinstance(key, str):
        raise WireError("entry has no string 'key'")
    enc = obj.get("enc")
    if enc is None or enc == "utf-8":
        return key.encode("utf-8", "surrogatepass")
    if enc == "base64":
        try:
            return base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise WireError(f"invalid base64 key: {exc}") from exc
    raise WireError(f"unknown key encoding {enc!r}")


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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = encode_key(self.key)
        out.update(
            rate=round(self.rate, 3), rule=self.rule, ttl_ms=self.ttl_ms, since=round(self.since, 3)
        )
        if self.db:
            out["db"] = self.db
        if self.kind is not None:
            out["kind"] = self.kind
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HotEntry:
        try:
            return cls(
                key=decode_key(obj),
                rate=float(obj["rate"]),
                rule=str(obj["rule"]),
                ttl_ms=int(obj["ttl_ms"]),
                since=float(obj.get("since", 0.0)),
                db=int(obj.get("db", 0)),
                kind=obj.get("kind"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"bad hot entry {obj!r}: {exc}") from exc


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
    def from_json(cls, obj: dict[str, Any]) -> CoolEntry:
        try:
            return cls(key=decode_key(obj), rule=str(obj.get("rule", "")), db=int(obj.get("db", 0)))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"bad cool entry {obj!r}: {exc}") from exc


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
    def loads(cls, data: bytes | str) -> Message:
        """Parse a notification; raises :class:`WireError` on anything malformed."""
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise WireError(f"notification is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise WireError("notification is not a JSON object")
        if obj.get("v") != WIRE_VERSION:
            raise WireError(
                f"unsupported wire version {obj.get('v')!r} (this client speaks {WIRE_VERSION})"
            )
        try:
            return cls(
                instance=str(obj["instance"]),
                seq=int(obj["seq"]),
                ts=float(obj["ts"]),
                hot=tuple(HotEntry.from_json(h) for h in obj.get("hot", [])),
                cool=tuple(CoolEntry.from_json(c) for c in obj.get("cool", [])),
                full=bool(obj.get("full", False)),
                final=bool(obj.get("final", False)),
                top=tuple(obj.get("top", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"bad notification: {exc}") from exc


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
    def invalidate_channel(self) -> str:
        return f"{self.prefix}:invalidate"

    def demand_channel(self, instance: str) -> str:
        """Where apps report the demand they served locally to daemon ``instance``."""
        return f"{self.prefix}:demand:{instance}"

    def idempotency_record(self, digest: str) -> str:
        """Record of one idempotency key (``digest``: the fixed-length key hash)."""
        return f"{self.prefix}:idem:{digest}"

    @property
    def idempotency_audit(self) -> str:
        """Capped stream of the idempotency guard's transitions."""
        return f"{self.prefix}:idem-audit"
