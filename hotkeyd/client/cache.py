"""HotCache: serve hot keys from process memory, pass cold keys straight to Redis.

::

    cache = HotCache.from_url("redis://127.0.0.1:6379/0")   # subscribes + bootstraps
    cache.get("item:1")          # cold: one dict lookup, then redis-py's GET
                                 # hot:  local copy, refreshed single-flight
    cache.set("item:1", b"v2")   # SET + PUBLISH invalidation in one round trip

Reads served locally are counted per hot key and reported to the daemon every 250 ms
(:mod:`hotkeyd.client.demand`), so it keeps seeing the demand the cache absorbs and the
key stays hot while the load lasts.

A key is served locally only while the daemon says it is hot; each copy lives for the
``ttl_ms`` of the rule that made it hot (capped by ``max_ttl``), so the staleness a
reader can see is bounded by that TTL even if every invalidation were lost, and is
normally the pub/sub latency of one invalidation (see ``docs/client.md``).
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from hotkeyd.client.consistency import WatchGate
from hotkeyd.client.demand import DemandCounter, DemandReporter, DemandStats
from hotkeyd.client.hotset import HotItem, HotSet, hot_lookup
from hotkeyd.client.invalidation import ServerTracking, TrackingMode, encode_invalidation
from hotkeyd.client.local import CacheStats, LocalCache
from hotkeyd.client.passthrough import InvalidatingPipeline, make_flush, pass_through
from hotkeyd.client.subscriber import Subscriber, start_failure
from hotkeyd.client.watchguard import Consistency, WatchStats
from hotkeyd.clock import Clock
from hotkeyd.conn.cluster import (
    AnyRedis,
    RedisCluster,
    client_db,
    client_from_any_url,
    is_cluster,
    publish,
    publish_command,
)
from hotkeyd.errors import ClientError
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DEFAULT_INTERVAL
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.protocol.limits import START_TIMEOUT_MS
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["CacheStats", "HotCache", "LocalCache"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
# What reads return: bytes, or str from a client made with decode_responses=True.
# HotCache[bytes] unless said otherwise (a TypeVar default, PEP 696, for type checkers).
if TYPE_CHECKING:
    from typing_extensions import TypeVar as _DefaultingTypeVar

    V = _DefaultingTypeVar("V", bytes, str, default=bytes)
else:
    V = TypeVar("V", bytes, str)
Broadcast = Literal["always", "known"]


class HotCache(Generic[V]):
    """A redis-py wrapper that caches hot keys locally and broadcasts invalidations.

    Args:
        client: the redis-py client every Redis command goes through.
        subscriber: feeds the hot set and invalidations; one is created (and owned,
            i.e. stopped by :meth:`close`) when omitted.
        namespace: Redis names of the deployment (used when creating the subscriber).
        clock: time source (used when creating the subscriber).
        max_entries: local cache entry bound.
        max_bytes: local cache size bound (estimated value bytes).
        max_ttl: cap on how long a local copy lives (s); the rule's ``ttl_ms`` otherwise.
        stale_for: seconds a stale copy may be served while one caller refreshes it.
        wait_timeout: how long a caller with no copy waits for the refresh in flight.
        broadcast: ``"always"`` publishes an invalidation for every write (correct even
            when instances disagree on what is hot); ``"known"`` only for keys this
            instance knows to be hot or has cached (cheaper, weaker: see docs).
        tracking: ``"optin"``/``"bcast"`` add Redis server-assisted invalidation
            (CLIENT TRACKING, RESP3) for promoted keys; needs ``tracking_url``.
        tracking_url: Redis URL for the tracking connection.
        tracking_prefixes: BCAST prefixes.
        metrics: optional :class:`~hotkeyd.client.metrics.ClientMetrics`.
        report_demand: report the reads served locally to the daemon (PUBLISH on
            ``client``); turn off only when nothing else must see them.
        report_interval: seconds between demand reports (0.25-0.5).
        auth: verify the daemons' HMAC signatures (:class:`~hotkeyd.protocol.auth.MessageAuth`,
            e.g. ``MessageAuth.from_env()``) and drop anything unsigned or forged.
        daemon_db: the db in the daemon's ``--redis-url`` (where its snapshots are),
            when it differs from this client's db (the subscriber reads from there).
        consistency: ``"available"`` (default) serves a copy until its TTL and counts the
            reads the daemon's watch did not vouch for (``watch_stats.lapsed``);
            ``"strict"`` serves a copy only while the watch of its node heartbeats
            (< 300 ms), under the epoch it was fetched in, once its key is armed; else
            the read goes to Redis (docs/consistency.md).

    A failed :meth:`start` (or :meth:`from_url`) stops what it started and raises the
    real cause: ``PublishError`` for credentials, ACL, MOVED from a cluster node and
    other errors retrying cannot fix (at once), ``UnreachableError`` naming the last
    connection error when Redis did not answer within ``timeout``.
    """

    def __init__(
        self,
        client: AnyRedis,
        subscriber: Subscriber | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        max_entries: int = 10_000,
        max_bytes: int = 32 << 20,
        max_ttl: float | None = None,
        stale_for: float = 1.0,
        wait_timeout: float = 0.5,
        broadcast: Broadcast = "always",
        tracking: TrackingMode = "off",
        tracking_url: str | None = None,
        tracking_prefixes: Iterable[str | bytes] = (),
        metrics: Any = None,
        report_demand: bool = True,
        report_interval: float = DEFAULT_INTERVAL,
        auth: MessageAuth | None = None,
        daemon_db: int = 0,
        consistency: Consistency = "available",
    ) -> None:
        if broadcast not in ("always", "known"):
            raise ValueError(f"broadcast must be 'always' or 'known', got {broadcast!r}")
        self.client = client
        self._reads: Any = client  # the same client; reads are typed by V, not its stubs
        self._owns_client = False
        # Hot entries carry the Redis db the daemon saw; a copy is only served to a
        # client of the same db (key names often repeat across dbs).
        self._db = client_db(client)
        self._cluster = is_cluster(client)  # a cluster pipeline cannot PUBLISH
        self._owns_subscriber = subscriber is None
        if subscriber is None:
            subscriber = Subscriber(
                client, namespace=namespace, clock=clock, auth=auth, daemon_db=daemon_db
            )
        self.subscriber = subscriber
        self.hotset: HotSet = subscriber.hotset
        self.namespace = subscriber.namespace
        self.clock = self.hotset.clock
        self.local = LocalCache(
            max_entries, max_bytes, clock=self.clock, stale_for=stale_for, wait_timeout=wait_timeout
        )
        self.max_ttl = max_ttl
        self.broadcast = broadcast
        self.origin = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._channel = self.namespace.invalidate_channel
        self._publish_cmd = publish_command(self.namespace.sharded)
        self._hot = self.hotset.items  # live dict: the one membership check of a cold read
        # db 0 looks keys up by their bytes, other dbs by (key, db): see hotset.ident
        self._hot_get = hot_lookup(self._hot, self._db)
        self._demand: DemandReporter | None = None
        if report_demand:
            counter = DemandCounter(
                self.hotset, self.origin, self.namespace, self.clock, interval=report_interval
            )
            self._demand = DemandReporter(
                counter, functools.partial(publish, self.client, sharded=self.namespace.sharded)
            )
        self._warn = RateLimitedLog(logger)
        self.bad_invalidations = 0
        self._tracking: ServerTracking | None = None
        if tracking != "off":
            if tracking_url is None:
                raise ClientError("tracking needs tracking_url (a RESP3 connection is opened)")
            self._tracking = ServerTracking(
                tracking_url,
                tracking,
                prefixes=tracking_prefixes,
                on_invalidate=self._on_tracking_push,
                on_reset=self.local.clear,
            )
        self.gate = WatchGate(
            consistency,
            self.hotset,
            self.clock,
            auth=auth,
            drop=self.local.invalidate,
            drop_all=self.local.clear,
        )
        self.consistency = self.gate.mode
        self.hotset.add_listener(on_cool=self.local.invalidate)
        subscriber.add_invalidation_listener(self._on_invalidation)
        subscriber.add_heartbeat_listener(self.gate.on_heartbeat)
        subscriber.add_reset_listener(self.local.clear)
        subscriber.add_reset_listener(self.gate.reset)
        if metrics is not None:
            metrics.bind(self)
        self._started = False

    @overload
    @classmethod
    def from_url(
        cls, url: str, *, decode_responses: Literal[True], **kwargs: Any
    ) -> HotCache[str]: ...

    @overload
    @classmethod
    def from_url(
        cls, url: str, *, decode_responses: Literal[False] = False, **kwargs: Any
    ) -> HotCache[bytes]: ...

    @classmethod
    def from_url(cls, url: str, *, decode_responses: bool = False, **kwargs: Any) -> HotCache[Any]:
        """Create a client for ``url`` (AUTH/ACL/TLS via the URL), start, and bootstrap.

        A Redis Cluster node in ``url`` makes a ``RedisCluster`` client. With
        ``decode_responses=True`` the client (and so every read) returns ``str``: the
        cache is then a ``HotCache[str]`` to type checkers, else ``HotCache[bytes]``.
        """
        # Timeouts unless the URL sets them: a half-open connection must not hang a
        # snapshot read forever.
        client = client_from_any_url(
            url,
            socket_timeout=10.0,
            socket_connect_timeout=5.0,
            decode_responses=decode_responses,
        )
        cache = cls(client, **kwargs)
        cache._owns_client = True
        return cache.start()

    # ---------------------------------------------------------------- lifecycle
    def start(self, timeout: float = START_TIMEOUT_MS / 1000) -> HotCache[V]:
        """Start the subscriber (if owned) and wait until the hot set is bootstrapped.

        With Redis down or silent for ``timeout`` seconds (``start_timeout_ms`` of
        spec/limits.json), raise :class:`UnreachableError` and stop again
        (spec/failure.md, start_redis_down).
        """
        if self._tracking is not None and not self._started:
            self._tracking.start()
        self._started = True
        self.subscriber.start()
        if not self.subscriber.wait_ready(timeout):
            cause = start_failure(self.subscriber, timeout)
            if self._owns_subscriber:
                # Raise within the bound: the thread ends after its connect attempt (redis-py
                # may retry that for seconds); waiting for it would stretch the bound.
                self.subscriber.stop(timeout=0)
            self.close()  # stop what failed: the subscriber thread it owns, tracking, client
            raise cause
        if self._demand is not None and self.hotset.demand_owner in (None, self):
            self.hotset.demand_owner = self
            self._demand.start()
        return self

    def close(self) -> None:
        """Stop what this cache owns (not the redis client it was given)."""
        if self._demand is not None and self.hotset.demand_owner is self:
            self._demand.stop()
            self.hotset.demand_owner = None
        if self._owns_subscriber:
            self.subscriber.stop()
        if self._tracking is not None:
            self._tracking.close()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> HotCache[V]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> CacheStats:
        return self.local.stats

    @property
    def watch_stats(self) -> WatchStats:
        """Heartbeats heard, epoch changes, lapses, strict-mode misses."""
        return self.gate.stats

    @property
    def demand_stats(self) -> DemandStats | None:
        """Counters of the demand reports this cache sends (None when it sends none)."""
        if self._demand is None or self.hotset.demand_owner is not self:
            return None
        return self._demand.stats

    def flush_demand(self) -> int:
        """Send the pending demand reports now (returns messages sent); e.g. before exit."""
        if self._demand is None or self.hotset.demand_owner is not self:
            return 0
        return self._demand.flush()

    # -------------------------------------------------------------------- reads
    def get(self, name: Any) -> V | None:
        """GET; served locally while ``name`` is hot."""
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return self._reads.get(name)
        return self._hot_read(item, ("g", k), k, "GET", name)

    def hget(self, name: Any, key: Any) -> V | None:
        """HGET; served locally while ``name`` is hot."""
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return self._reads.hget(name, key)
        return self._hot_read(item, ("h", k, key_bytes(key)), k, "HGET", name, key)

    def hgetall(self, name: Any) -> dict[V, V]:
        """HGETALL; served locally while ``name`` is hot (a copy of the dict)."""
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return self._reads.hgetall(name)
        return dict(self._hot_read(item, ("H", k), k, "HGETALL", name))

    def cached(self, key: Any, loader: Callable[[], T], ttl: float | None = None) -> T:
        """``loader()`` (e.g. a DB read) cached while ``key`` is hot, single-flight.

        Invalidate it after the underlying data changes with :meth:`invalidate`.
        """
        k = key if key.__class__ is bytes else key_bytes(key)
        item = self._hot_get(k)
        now = self.clock.monotonic()
        if item is None or item.expires <= now:
            return loader()  # cold: no caching, no db check (the loader is not Redis)
        self.gate.settle(k, now)  # not watched (not Redis), but invalidations apply
        ckey = ("c", k)
        hit, value = self.local.get_fresh(ckey, now)
        if hit:
            item.served += 1
            return value
        return self._load(item, ckey, k, loader, self._ttl(item) if ttl is None else ttl)

    def mget(self, keys: Any, *args: Any) -> list[V | None]:
        """MGET; hot keys come from the local cache, the rest in one MGET."""
        names = [*keys, *args] if isinstance(keys, (list, tuple)) else [keys, *args]
        hot = self._hot
        kbs = [n if n.__class__ is bytes else key_bytes(n) for n in names]
        if not any(kb in hot for kb in kbs):
            return list(self._mget(names))
        now = self.clock.monotonic()
        out: list[Any] = [None] * len(names)
        need: list[int] = []
        flights: dict[int, Any] = {}
        gate = self.gate
        for i, kb in enumerate(kbs):
            item = hot.get(kb)
            if item is None or item.expires <= now or item.entry.db != self._db:
                need.append(i)
                continue
            ckey = ("g", kb)
            if not gate.admit(ckey, kb, now) and not gate.before_fetch(ckey, kb, self._db, now):
                need.append(i)  # strict, unwatched: from Redis, not cached
                continue
            hit, value = self.local.get_fresh(ckey, now)
            if hit:
                item.served += 1
                out[i] = value
                continue
            if not gate.before_fetch(ckey, kb, self._db, now):
                need.append(i)
                continue
            flight, stale = self.local.begin(ckey, kb, now)
            if flight is None and stale is not None and now < stale.expires + self.local.stale_for:
                item.served += 1
                out[i] = stale.value  # someone else refreshes it
                continue
            if flight is not None:
                flights[i] = (flight, self._ttl(item))
            need.append(i)
        if need:
            try:
                values = self._mget([names[i] for i in need])
            except BaseException as exc:
                for flight, _ in flights.values():
                    self.local.fail(flight, exc)
                raise
            for i, v in zip(need, values, strict=True):
                out[i] = v
                if i in flights:
                    flight, ttl = flights[i]
                    self.local.finish(flight, v, ttl)
        return out

    def _mget(self, names: list[Any]) -> Any:
        if isinstance(self.client, RedisCluster):  # keys of several slots: MGET per node
            return self.client.mget_nonatomic(names)
        return self.client.mget(names)

    def _hot_read(self, item: HotItem, ckey: Hashable, k: bytes, command: str, *args: Any) -> Any:
        now = self.clock.monotonic()
        if item.expires <= now or item.entry.db != self._db:  # cold (or another db)
            return self.client.execute_command(command, *args)
        if self.gate.admit(ckey, k, now):
            hit, value = self.local.get_fresh(ckey, now)
            if hit:
                item.served += 1
                return value
        if not self.gate.before_fetch(ckey, k, self._db, now):
            return self.client.execute_command(command, *args)  # strict and unwatched
        tracking = self._tracking
        if tracking is not None:
            return self._load(item, ckey, k, lambda: tracking.read(command, *args), self._ttl(item))
        return self._load(
            item, ckey, k, lambda: self.client.execute_command(command, *args), self._ttl(item)
        )

    def _load(
        self, item: HotItem, ckey: Hashable, k: bytes, read: Callable[[], T], ttl: float
    ) -> T:
        """Single-flight load; a read answered without calling ``read`` was served locally."""
        went = False

        def loader() -> T:
            nonlocal went
            went = True
            return read()

        value = self.local.load(ckey, k, loader, ttl)
        if not went:
            item.served += 1
        return value

    def _ttl(self, item: HotItem) -> float:
        ttl = item.entry.ttl_ms / 1000.0
        return ttl if self.max_ttl is None else min(ttl, self.max_ttl)

    # ------------------------------------------------------------------- writes
    def set(self, name: Any, value: Any, **kwargs: Any) -> Any:
        """SET (any redis-py options), then invalidate ``name`` everywhere."""
        return self._write((name,), lambda p: p.set(name, value, **kwargs))

    def delete(self, *names: Any) -> Any:
        return self._write(names, lambda p: p.delete(*names))

    def unlink(self, *names: Any) -> Any:
        return self._write(names, lambda p: p.unlink(*names))

    def getdel(self, name: Any) -> V | None:
        return self._write((name,), lambda p: p.getdel(name))

    def mset(self, mapping: dict[Any, Any]) -> Any:
        return self._write(tuple(mapping), lambda p: p.mset(mapping))

    def incr(self, name: Any, amount: int = 1) -> Any:
        return self._write((name,), lambda p: p.incrby(name, amount))

    incrby = incr

    def decr(self, name: Any, amount: int = 1) -> Any:
        return self._write((name,), lambda p: p.decrby(name, amount))

    decrby = decr

    def incrbyfloat(self, name: Any, amount: float = 1.0) -> Any:
        return self._write((name,), lambda p: p.incrbyfloat(name, amount))

    def append(self, name: Any, value: Any) -> Any:
        return self._write((name,), lambda p: p.append(name, value))

    def hset(self, name: Any, key: Any = None, value: Any = None, mapping: Any = None) -> Any:
        return self._write((name,), lambda p: p.hset(name, key, value, mapping=mapping))

    def hdel(self, name: Any, *keys: Any) -> Any:
        return self._write((name,), lambda p: p.hdel(name, *keys))

    def hincrby(self, name: Any, key: Any, amount: int = 1) -> Any:
        return self._write((name,), lambda p: p.hincrby(name, key, amount))

    def hincrbyfloat(self, name: Any, key: Any, amount: float = 1.0) -> Any:
        return self._write((name,), lambda p: p.hincrbyfloat(name, key, amount))

    def expire(self, name: Any, time: Any, **kwargs: Any) -> Any:
        return self._write((name,), lambda p: p.expire(name, time, **kwargs))

    def pexpire(self, name: Any, time: Any, **kwargs: Any) -> Any:
        return self._write((name,), lambda p: p.pexpire(name, time, **kwargs))

    def expireat(self, name: Any, when: Any, **kwargs: Any) -> Any:
        return self._write((name,), lambda p: p.expireat(name, when, **kwargs))

    def persist(self, name: Any) -> Any:
        return self._write((name,), lambda p: p.persist(name))

    # ------------------------------------------------------------- pass-through
    def __getattr__(self, name: str) -> Any:
        """Any other redis-py command; writes to strings, hashes or keys invalidate."""
        return pass_through(self.client, name, self._write)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> InvalidatingPipeline:
        """A pipeline whose writes invalidate their keys when it executes."""
        pipe = self.client.pipeline(transaction=transaction, shard_hint=shard_hint)
        return InvalidatingPipeline(pipe, make_flush(self))

    def invalidate(self, *names: Any) -> None:
        """Drop ``names`` here and broadcast their invalidation (e.g. after a DB write)."""
        kbs = [key_bytes(n) for n in names]
        payload = self._payload(kbs)
        self.client.execute_command(self._publish_cmd, self._channel, payload)
        for kb in kbs:
            self.local.invalidate(kb)

    def _payload(self, kbs: list[bytes]) -> bytes:
        """The invalidation of ``kbs``, signed with ``auth`` (apps with it drop unsigned ones)."""
        payload = encode_invalidation(self.origin, kbs)
        return payload if self.gate.auth is None else self.gate.auth.sign(payload)

    def _write(self, names: tuple[Any, ...], add: Callable[[Any], Any]) -> Any:
        kbs = [key_bytes(n) for n in names]
        if self.broadcast == "known" and not any(kb in self._hot or kb in self.local for kb in kbs):
            return add(self.client)
        payload = self._payload(kbs)
        try:
            if self._cluster:  # the write goes to its slot's node, the invalidation after it
                result = add(self.client)
                self.client.execute_command(self._publish_cmd, self._channel, payload)
            else:  # one round trip
                pipe = self.client.pipeline(transaction=False)
                add(pipe)
                pipe.execute_command(self._publish_cmd, self._channel, payload)
                result = pipe.execute()[0]
        finally:
            for kb in kbs:  # also when the write failed: its effect is unknown
                self.local.invalidate(kb)
        return result

    # ------------------------------------------------------------ invalidations
    def _on_invalidation(self, payload: bytes) -> None:
        if not self.gate.on_invalidation(payload):
            self.bad_invalidations += 1

    def _on_tracking_push(self, key: bytes | None) -> None:
        if key is None:
            self.local.clear()
        else:
            self.local.invalidate(key)
