"""Reading the snapshots daemons keep in Redis: for ``hotkeyd top`` and client bootstrap.

Each live instance ``I`` keeps ``{<prefix>}:snapshot:<I>`` (a JSON message with
``full: true``, its hot set, its top keys by rate, and the ``seq`` of the last message
it reflects) with a TTL its heartbeat refreshes, and a member ``I`` in the sorted set
``{<prefix>}:instances`` scored by its last heartbeat (unix seconds).

Readers prune the index as they go: members scored older than ``max_age`` seconds,
and members whose snapshot key has expired (the instance died without cleaning up),
are removed, so the index cannot grow without bound however many daemons come and go.

A client that wants an exact view subscribes to the channel *first*, then calls
:func:`fetch_snapshots`, then applies buffered messages of instance ``I`` whose
``seq`` is greater than ``snapshots[I].seq``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.exceptions as rexc

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.redis import translate_redis_error
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.wire import HotEntry, Message, Namespace, WireError

__all__ = [
    "DEFAULT_MAX_AGE",
    "MergedSnapshot",
    "fetch_snapshots",
    "list_instances",
    "merge_snapshots",
    "read_merged",
]

logger = logging.getLogger(__name__)
_ratelog = RateLimitedLog(logger, 30.0)

DEFAULT_MAX_AGE = 30.0
"""Seconds after its last heartbeat an index member is pruned even if its snapshot
key still exists; generous, because heartbeat scores come from the daemons' clocks."""


def list_instances(
    client: redis.Redis,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
) -> list[str]:
    """Return instance ids with a heartbeat in the last ``max_age`` s, newest first.

    Older members are removed from the index (the stale-instance prune).

    Raises:
        UnreachableError, PublishError: Redis failed (one readable line).
    """
    now = (clock or SystemClock()).time()
    try:
        pipe = client.pipeline(transaction=False)
        pipe.zremrangebyscore(namespace.instances, "-inf", f"({now - max_age}")
        pipe.zrevrange(namespace.instances, 0, -1)
        _, members = pipe.execute()
    except (rexc.RedisError, OSError) as exc:
        raise translate_redis_error(exc) from exc
    return [m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m) for m in members]


def fetch_snapshots(
    client: redis.Redis,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
) -> dict[str, Message]:
    """Return the snapshot of every live instance, by instance id.

    Instances whose snapshot key has expired are removed from the index; a snapshot
    that does not parse is skipped (and logged at a limited rate), never fatal.

    Raises:
        UnreachableError, PublishError: Redis failed.
    """
    instances = list_instances(client, namespace, clock=clock, max_age=max_age)
    if not instances:
        return {}
    try:
        raws = client.mget([namespace.snapshot(i) for i in instances])
    except (rexc.RedisError, OSError) as exc:
        raise translate_redis_error(exc) from exc
    out: dict[str, Message] = {}
    gone: list[str] = []
    for instance, raw in zip(instances, raws, strict=True):
        if raw is None:
            gone.append(instance)
            continue
        try:
            out[instance] = Message.loads(raw)
        except WireError as exc:
            _ratelog.warning(
                "bad-snapshot", "skipping unreadable snapshot of %s: %s", instance, exc
            )
    if gone:
        try:
            client.zrem(namespace.instances, *gone)
        except (rexc.RedisError, OSError) as exc:  # pruning is housekeeping; reading succeeded
            _ratelog.warning(
                "prune", "could not prune stale instances: %s", translate_redis_error(exc)
            )
    return out


@dataclass(frozen=True)
class MergedSnapshot:
    """The union of several instances' snapshots.

    Attributes:
        instances: ids of the instances merged, sorted.
        seqs: per instance, the seq its snapshot reflects (for gap detection).
        hot: one entry per (key, db) hot anywhere: the entry with the highest rate.
        hot_instances: per (key, db), the instances reporting it hot.
        top: top keys by rate, rates *summed* over instances (instances normally
            read disjoint parts of the traffic, e.g. Kafka partitions), highest first.
    """

    instances: tuple[str, ...] = ()
    seqs: Mapping[str, int] = field(default_factory=dict)
    hot: tuple[HotEntry, ...] = ()
    hot_instances: Mapping[tuple[bytes, int], tuple[str, ...]] = field(default_factory=dict)
    top: tuple[dict[str, Any], ...] = ()

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """JSON view, as ``hotkeyd top --json`` prints it."""
        hot = []
        for entry in self.hot:
            obj = entry.to_json()
            obj["instances"] = list(self.hot_instances.get((entry.key, entry.db), ()))
            hot.append(obj)
        out: dict[str, Any] = {
            "instances": list(self.instances),
            "seqs": dict(self.seqs),
            "hot": hot,
            "top": [dict(t) for t in self.top],
        }
        if now is not None:
            out["ts"] = round(now, 3)
        return out


def merge_snapshots(snapshots: Mapping[str, Message], *, top_limit: int = 100) -> MergedSnapshot:
    """Merge per-instance snapshots into one view (see :class:`MergedSnapshot`)."""
    best: dict[tuple[bytes, int], HotEntry] = {}
    owners: dict[tuple[bytes, int], list[str]] = {}
    top: dict[tuple[str, str, int], dict[str, Any]] = {}
    for instance in sorted(snapshots):
        snap = snapshots[instance]
        for entry in snap.hot:
            ident = (entry.key, entry.db)
            owners.setdefault(ident, []).append(instance)
            if ident not in best or entry.rate > best[ident].rate:
                best[ident] = entry
        for item in snap.top:
            if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
                continue
            try:
                rate = float(item.get("rate", 0.0))
                tident = (item["key"], str(item.get("enc", "")), int(item.get("db", 0)))
            except (TypeError, ValueError):
                continue
            merged = top.get(tident)
            if merged is None:
                merged = top[tident] = dict(item)
                merged["rate"] = 0.0
                merged["instances"] = 0
            merged["rate"] = round(merged["rate"] + rate, 3)
            merged["instances"] += 1
            if item.get("hot"):
                merged["hot"] = True
    hot = tuple(sorted(best.values(), key=lambda e: (-e.rate, e.db, e.key)))
    ranked = sorted(top.values(), key=lambda t: -t["rate"])[:top_limit]
    return MergedSnapshot(
        instances=tuple(sorted(snapshots)),
        seqs={i: s.seq for i, s in snapshots.items()},
        hot=hot,
        hot_instances={k: tuple(v) for k, v in owners.items()},
        top=tuple(ranked),
    )


def read_merged(
    client: redis.Redis,
    namespace: Namespace | None = None,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
    top_limit: int = 100,
) -> dict[str, Any]:
    """Fetch every live snapshot and return the merged JSON view (``hotkeyd top``).

    Returns:
        ``{"instances": [...], "seqs": {...}, "hot": [...], "top": [...], "ts": now}``.
    """
    clock = clock or SystemClock()
    snaps = fetch_snapshots(client, namespace or Namespace(), clock=clock, max_age=max_age)
    return merge_snapshots(snaps, top_limit=top_limit).to_json(now=clock.time())
