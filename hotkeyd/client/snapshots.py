"""The one snapshot reader: ``hotkeyd top``, client bootstrap and resync all use it.

Each live instance ``I`` keeps ``{<prefix>}:snapshot:<I>`` (a JSON message with
``full: true``, its hot set, its top keys by rate, and the ``seq`` of the last message
it reflects) with a TTL its heartbeat refreshes, and a member ``I`` in the sorted set
``{<prefix>}:instances`` scored by its last heartbeat (unix seconds).

Reading is **read-only** and **cluster-safe**: one ZREVRANGEBYSCORE for the instances
heard from in the last ``max_age`` seconds, then one MGET of their snapshots. Every name
carries the ``{<prefix>}`` hash tag, so the MGET never crosses a cluster slot. Index
members whose snapshot has expired are skipped; pruning them is the daemons' job (each
heartbeat removes members older than :data:`hotkeyd.protocol.wire.INSTANCE_MAX_AGE`), so a user
with read-only rights can run ``hotkeyd top``. A snapshot that does not parse is
skipped and counted (``on_bad``), never fatal.

A client that wants an exact view subscribes to the channel *first*, then calls
:func:`fetch_snapshots`, then applies buffered messages of instance ``I`` whose
``seq`` is greater than ``snapshots[I].seq``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.redis import REDIS_ERRORS, translate_redis_error
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import INSTANCE_MAX_AGE, HotEntry, Message, Namespace, WireError
from hotkeyd.ratelog import RateLimitedLog

__all__ = [
    "DEFAULT_MAX_AGE",
    "MergedSnapshot",
    "afetch_snapshots",
    "alist_instances",
    "fetch_snapshots",
    "list_instances",
    "merge_snapshots",
    "read_merged",
    "read_snapshots",
]

logger = logging.getLogger(__name__)
_ratelog = RateLimitedLog(logger, 30.0)

DEFAULT_MAX_AGE = INSTANCE_MAX_AGE
"""Seconds after its last heartbeat an instance is no longer read; generous, because
heartbeat scores come from the daemons' clocks."""

OnBad = Callable[[str, WireError], None]


def _log_bad(instance: str, exc: WireError) -> None:
    _ratelog.warning("bad-snapshot", "skipping unreadable snapshot of %s: %s", instance, exc)


def _ids(members: Iterable[bytes | str]) -> list[str]:
    return [m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m) for m in members]


def _parse(
    ids: list[str], raws: Iterable[Any], on_bad: OnBad | None, auth: MessageAuth | None = None
) -> dict[str, Message]:
    out: dict[str, Message] = {}
    for instance, raw in zip(ids, raws, strict=True):
        if raw is None:  # expired: the instance died without cleaning up
            continue
        if auth is not None:
            raw = auth.verify(raw if isinstance(raw, bytes) else str(raw).encode("utf-8"))
            if raw is None:
                (on_bad or _log_bad)(instance, WireError("unsigned, or signed with another key"))
                continue
        try:
            msg = Message.loads(raw)
        except WireError as exc:
            (on_bad or _log_bad)(instance, exc)
            continue
        out[instance] = msg if msg.full else replace(msg, full=True)
    return out


def _range_args(
    namespace: Namespace, clock: Clock | None, max_age: float
) -> tuple[str, str, float]:
    return namespace.instances, "+inf", (clock or SystemClock()).time() - max_age


def list_instances(
    client: Any,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
) -> list[str]:
    """Instance ids with a heartbeat in the last ``max_age`` s, newest first (read-only).

    ``client`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster``.

    Raises:
        UnreachableError, PublishError: Redis failed (one readable line).
    """
    try:
        return _ids(client.zrevrangebyscore(*_range_args(namespace, clock, max_age)))
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc) from exc


def fetch_snapshots(
    client: Any,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
    instances: list[str] | None = None,
    on_bad: OnBad | None = None,
    auth: MessageAuth | None = None,
) -> dict[str, Message]:
    """The snapshot of every live instance (or of ``instances``), by instance id.

    A snapshot that does not parse (or, with ``auth``, does not verify) is passed to
    ``on_bad`` (logged by default) and left out, never fatal.

    Raises:
        UnreachableError, PublishError: Redis failed.
    """
    ids = (
        instances
        if instances is not None
        else list_instances(client, namespace, clock=clock, max_age=max_age)
    )
    if not ids:
        return {}
    try:
        raws = client.mget([namespace.snapshot(i) for i in ids])
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc) from exc
    return _parse(ids, raws, on_bad, auth)


async def alist_instances(
    client: Any,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
) -> list[str]:
    """:func:`list_instances` for ``redis.asyncio`` clients (plain or cluster)."""
    try:
        return _ids(await client.zrevrangebyscore(*_range_args(namespace, clock, max_age)))
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc) from exc


async def afetch_snapshots(
    client: Any,
    namespace: Namespace,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
    instances: list[str] | None = None,
    on_bad: OnBad | None = None,
    auth: MessageAuth | None = None,
) -> dict[str, Message]:
    """:func:`fetch_snapshots` for ``redis.asyncio`` clients (plain or cluster)."""
    ids = (
        instances
        if instances is not None
        else await alist_instances(client, namespace, clock=clock, max_age=max_age)
    )
    if not ids:
        return {}
    try:
        raws = await client.mget([namespace.snapshot(i) for i in ids])
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc) from exc
    return _parse(ids, raws, on_bad, auth)


def read_snapshots(
    client: Any,
    namespace: Namespace,
    clock: Clock | None = None,
    *,
    stale_after: float = DEFAULT_MAX_AGE,
    instances: list[str] | None = None,
) -> list[Message]:
    """The live snapshots as a list (each one ``full``), e.g. to bootstrap a HotSet."""
    return list(
        fetch_snapshots(
            client, namespace, clock=clock, max_age=stale_after, instances=instances
        ).values()
    )


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
                merged.pop("local", None)
                merged["instances"] = 0
            merged["rate"] = round(merged["rate"] + rate, 3)
            local = _number(item.get("local"))
            if local:  # served by app caches (demand reports): summed like the rate
                merged["local"] = round(merged.get("local", 0.0) + local, 3)
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
    client: Any,
    namespace: Namespace | None = None,
    *,
    clock: Clock | None = None,
    max_age: float = DEFAULT_MAX_AGE,
    top_limit: int = 100,
) -> dict[str, Any]:
    """Fetch every live snapshot and return the merged JSON view (``hotkeyd top``).

    Returns:
        ``{"instances": [...], "seqs": {...}, "hot": [...], "top": [...], "ts": now}``,
        plus ``"bad_snapshots": [instance, ...]`` when some did not parse (skipped).
    """
    clock = clock or SystemClock()
    bad: list[str] = []

    def on_bad(instance: str, exc: WireError) -> None:
        bad.append(instance)
        _log_bad(instance, exc)

    snaps = fetch_snapshots(
        client, namespace or Namespace(), clock=clock, max_age=max_age, on_bad=on_bad
    )
    out = merge_snapshots(snaps, top_limit=top_limit).to_json(now=clock.time())
    if bad:
        out["bad_snapshots"] = sorted(bad)
    return out


def _number(v: Any) -> float:
    """A non-negative finite number from an untrusted snapshot field, else 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        return 0.0
    return float(v)
