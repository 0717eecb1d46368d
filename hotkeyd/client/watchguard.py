"""The app side of the daemon's watch: heartbeats, strict/available serving, intake.

Pure logic with the clock passed in, so ``spec/vectors/watch.json`` runs through it
unchanged (docs/consistency.md has the semantics; every SDK implements the same):

- :func:`decode_heartbeat` validates one message of ``<prefix>:watch``;
- :class:`WatchLeases` keeps the latest heartbeat per (instance, node) and answers
  :meth:`~WatchLeases.guard` (what a read of a key beginning now is covered by) and
  :meth:`~WatchLeases.serves` (may a copy taken under that guard be served now);
- :class:`InvalidationIntake` checks an invalidation's size and signature and drops a
  key's copy at most once per ``invalidation_key_interval_ms``, deferring (never
  discarding) the early ones to the key's next read.

A key's node: the heartbeats of the announcing instance whose ``slots`` hold the key's
cluster slot (CRC16 of the hash tag, mod 16384); a heartbeat without ``slots`` (a plain
node) covers every key. Every covering node must be fresh, up and armed: with several
plain ``--watch-url`` nodes an app cannot know which one holds its key, so all must.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from hotkeyd.protocol import limits
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import WireError, decode_key

__all__ = [
    "CONSISTENCY_MODES",
    "Consistency",
    "Guard",
    "Heartbeat",
    "IntakeStats",
    "InvalidationIntake",
    "WatchLeases",
    "WatchStats",
    "decode_heartbeat",
]

Consistency = Literal["available", "strict"]
CONSISTENCY_MODES: tuple[str, ...] = ("available", "strict")

LEASE_S = limits.limit("watch_lease_ms") / 1000
KEY_INTERVAL_S = limits.limit("invalidation_key_interval_ms") / 1000
INVALIDATION_BYTES_MAX = limits.limit("invalidation_bytes_max")
INVALIDATION_KEYS_MAX = limits.limit("invalidation_keys_max")
_SEQ_MAX = limits.SEQ_MAX
_NAME_MAX = limits.NAME_CHARS_MAX
_SKEW_S = float(limits.CLOCK_SKEW_S_MAX)
_EPS = 1e-9

Guard = tuple[str, tuple[tuple[str, int], ...]]
"""What a copy was fetched under: (instance, ((node, epoch), ...))."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One decoded heartbeat (spec/schema/watch-heartbeat-v1.json)."""

    instance: str
    node: str
    epoch: int
    up: bool
    armed: int
    ts: float
    slots: tuple[tuple[int, int], ...] | None = None

    def covers(self, slot: int) -> bool:
        return self.slots is None or any(a <= slot <= b for a, b in self.slots)


def _int(obj: dict[str, Any], name: str, default: int | None = None) -> int:
    v = obj.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _SEQ_MAX:
        raise WireError(f"heartbeat {name} must be an integer in [0, {_SEQ_MAX}]")
    return v


def _name(obj: dict[str, Any], name: str) -> str:
    v = obj.get(name)
    if not isinstance(v, str) or not 1 <= len(v) <= _NAME_MAX:
        raise WireError(f"heartbeat {name} must be a string of 1..{_NAME_MAX} characters")
    return v


def decode_heartbeat(payload: bytes | str, now_s: float) -> Heartbeat:
    """Parse one heartbeat (already verified when auth is on); raises WireError."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise WireError(f"heartbeat is not JSON: {exc}") from None
    if not isinstance(obj, dict) or obj.get("v") != 1 or isinstance(obj.get("v"), bool):
        raise WireError("heartbeat is not a v1 object")
    ts = obj.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise WireError("heartbeat ts must be a finite number >= 0")
    if ts > now_s + _SKEW_S:
        raise WireError("heartbeat ts is too far ahead of this clock (forged?)")
    up = obj.get("up")
    if not isinstance(up, bool):
        raise WireError("heartbeat up must be a boolean")
    slots = None
    if "slots" in obj:
        raw = obj["slots"]
        if not isinstance(raw, list):
            raise WireError("heartbeat slots must be a list")
        out = []
        for r in raw:
            if (
                not isinstance(r, list)
                or len(r) != 2
                or any(isinstance(x, bool) or not isinstance(x, int) for x in r)
                or not 0 <= r[0] <= r[1] <= 16383
            ):
                raise WireError(f"bad slot range {str(r)[:40]}")
            out.append((r[0], r[1]))
        slots = tuple(out)
    return Heartbeat(
        instance=_name(obj, "instance"),
        node=_name(obj, "node"),
        epoch=_int(obj, "epoch"),
        up=up,
        armed=_int(obj, "armed", 0),
        ts=float(ts),
        slots=slots,
    )


@dataclass(slots=True)
class WatchStats:
    """What the watch did for one cache (visible in each SDK's stats)."""

    heartbeats: int = 0
    bad_heartbeats: int = 0
    epoch_changes: int = 0  # a node's watch reconnected: every copy dropped
    lapsed: int = 0  # reads of a hot key while its watch was not vouching for the copy
    strict_misses: int = 0  # of those, reads strict mode sent to Redis
    unwatched_copies: int = 0  # copies taken while no watch covered the key


class WatchLeases:
    """The latest heartbeat per (instance, node), and the decisions made from them.

    Args:
        lease: seconds a heartbeat vouches for its node (``watch_lease_ms``).
    """

    def __init__(self, lease: float = LEASE_S) -> None:
        self.lease = lease
        self._latest: dict[tuple[str, str], tuple[Heartbeat, float]] = {}
        self.stats = WatchStats()

    @property
    def seen(self) -> bool:
        """True once any heartbeat arrived (a daemon with its watch on is out there)."""
        return bool(self._latest)

    def heard(self, hb: Heartbeat, at: float) -> bool:
        """Record a heartbeat that arrived at monotonic ``at``.

        Returns True when the node's epoch changed: copies fetched under the old one
        may have missed a write, so the caller drops every copy.
        """
        self.stats.heartbeats += 1
        prev = self._latest.get((hb.instance, hb.node))
        self._latest[(hb.instance, hb.node)] = (hb, at)
        if prev is not None and prev[0].epoch != hb.epoch:
            self.stats.epoch_changes += 1
            return True
        return False

    def forget(self) -> None:
        """After a lost subscription: no heartbeat heard counts any more."""
        self._latest.clear()

    def guard(self, slot: int, hot: Iterable[tuple[str, int]], now: float) -> Guard | None:
        """The guard of a read of a key in ``slot`` beginning at ``now``.

        ``hot``: (instance, seq of the announcement that made the key hot there). The
        first instance whose every covering node is fresh, up and armed at that seq wins;
        None when no instance vouches for the key (strict mode then reads Redis).
        """
        for instance, seq in hot:
            nodes = []
            ok = True
            for (inst, node), (hb, at) in self._latest.items():
                if inst != instance or not hb.covers(slot):
                    continue
                if not hb.up or now - at >= self.lease - _EPS or hb.armed < seq:
                    ok = False
                    break
                nodes.append((node, hb.epoch))
            if ok and nodes:
                return instance, tuple(sorted(nodes))
        return None

    def serves(self, guard: Guard | None, slot: int, now: float) -> bool:
        """True while every node of ``guard`` is fresh, up, still covers ``slot`` and
        carries the guard's epoch."""
        if guard is None:
            return False
        instance, nodes = guard
        for node, epoch in nodes:
            latest = self._latest.get((instance, node))
            if latest is None:
                return False
            hb, at = latest
            if not hb.up or hb.epoch != epoch or now - at >= self.lease - _EPS:
                return False
            if not hb.covers(slot):
                return False
        return True


@dataclass(slots=True)
class IntakeStats:
    applied: int = 0  # key drops applied (at once or deferred)
    deferred: int = 0  # key drops deferred by the per-key interval
    oversized: int = 0  # messages over invalidation_bytes_max or invalidation_keys_max
    unsigned: int = 0  # messages without a valid signature (auth on)
    bad: int = 0  # malformed messages


@dataclass(slots=True)
class InvalidationIntake:
    """Every invalidation a cache receives goes through here (docs/consistency.md).

    :meth:`receive` returns the keys whose copies drop now; a key dropped less than
    ``interval`` ago is *pending* instead, and :meth:`due` (called at each read of the
    key) tells when its drop applies. Oversized, unsigned (auth on) and malformed
    messages are counted and dropped whole: never a flush, never an exception.
    """

    auth: MessageAuth | None = None
    interval: float = KEY_INTERVAL_S
    max_bytes: int = INVALIDATION_BYTES_MAX
    max_keys: int = INVALIDATION_KEYS_MAX
    max_tracked: int = 100_000
    stats: IntakeStats = field(default_factory=IntakeStats)
    pending: dict[bytes, float] = field(default_factory=dict)
    _last: dict[bytes, float] = field(default_factory=dict)

    def receive(self, payload: bytes, now: float) -> list[bytes] | None:
        """Keys to drop now; None when the message was dropped (counted)."""
        if len(payload) > self.max_bytes:
            self.stats.oversized += 1
            return None
        if self.auth is not None:
            body = self.auth.verify(payload)
            if body is None:
                self.stats.unsigned += 1
                return None
            payload = body
        try:
            keys = _decode_keys(payload, self.max_keys)
        except _TooMany:
            self.stats.oversized += 1
            return None
        except WireError:
            self.stats.bad += 1
            return None
        return [k for k in keys if self.arrive(k, now)]

    def arrive(self, key: bytes, now: float) -> bool:
        """One invalidation of ``key``: True if its drop applies now."""
        at = self.pending.get(key)
        if at is not None:
            if at > now + _EPS:
                return False  # already deferred: coalesced into that drop
            del self.pending[key]  # its time came before any read: apply it now
            self._applied(key, now)
            return True
        last = self._last.get(key)
        if last is None or now - last >= self.interval - _EPS:
            self._applied(key, now)
            return True
        self.pending[key] = last + self.interval
        self.stats.deferred += 1
        return False

    def due(self, key: bytes, now: float) -> bool:
        """At a read of ``key``: True if its deferred drop applies now (drop the copy)."""
        at = self.pending.get(key)
        if at is None or at > now + _EPS:
            return False
        del self.pending[key]
        self._applied(key, now)
        return True

    def _applied(self, key: bytes, at: float) -> None:
        self.stats.applied += 1
        if len(self._last) >= self.max_tracked:
            cutoff = at - self.interval  # older entries no longer limit anything
            self._last = {k: t for k, t in self._last.items() if t > cutoff}
        self._last[key] = at


class _TooMany(WireError):
    pass


def _decode_keys(payload: bytes, max_keys: int) -> list[bytes]:
    from hotkeyd.protocol import strictjson

    try:
        obj = strictjson.loads(payload)
    except strictjson.JSONRejected as exc:
        raise WireError(f"invalidation rejected: {exc}") from None
    if not isinstance(obj, dict) or obj.get("v") != 1 or not isinstance(obj.get("keys"), list):
        raise WireError("invalidation is not a v1 object with a 'keys' list")
    if len(obj["keys"]) > max_keys:
        raise _TooMany(f"invalidation carries more than {max_keys} keys")
    out = []
    for k in obj["keys"]:
        if not isinstance(k, dict):
            raise WireError("bad key entry")
        out.append(decode_key(k))
    return out
