"""AsyncHotCache: the asyncio twin of :class:`~hotkeyd.client.cache.HotCache`.

Same behaviour on ``redis.asyncio``: cold keys pass through after one dict lookup, hot
keys come from a bounded :class:`~hotkeyd.client.local.LocalCache`, refreshes are
single-flight (followers await the leader's future, or take the stale copy within
``stale_for``), and writes publish an invalidation in the same round trip. It is fed
by an :class:`~hotkeyd.client.aio.AsyncSubscriber` on the same event loop, and reports
the reads it served locally to the daemon from a task on that loop
(:mod:`hotkeyd.client.demand`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar, cast

from hotkeyd.client.aio import AsyncSubscriber
from hotkeyd.client.consistency import WatchGate
from hotkeyd.client.demand import AsyncDemandReporter, DemandCounter, DemandStats
from hotkeyd.client.hotset import HotItem, HotSet, hot_lookup
from hotkeyd.client.invalidation import encode_invalidation
from hotkeyd.client.local import CacheStats, LocalCache
from hotkeyd.client.passthrough import AsyncInvalidatingPipeline, make_flush, pass_through
from hotkeyd.client.subscriber import start_failure
from hotkeyd.client.watchguard import Consistency, WatchStats
from hotkeyd.clock import Clock
from hotkeyd.conn.cluster import (
    AnyAsyncRedis,
    aclient_from_url,
    apublish,
    client_db,
    is_cluster,
    publish_command,
)
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DEFAULT_INTERVAL
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.protocol.limits import START_TIMEOUT_MS
from hotkeyd.protocol.wire import Namespace

__all__ = ["AsyncHotCache"]

T = TypeVar("T")
_RETRY = object()


class AsyncHotCache:
    """``redis.asyncio`` wrapper caching hot keys locally; see :class:`HotCache` for args."""

    def __init__(
        self,
        client: AnyAsyncRedis,
        subscriber: AsyncSubscriber | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        max_entries: int = 10_000,
        max_bytes: int = 32 << 20,
        max_ttl: float | None = None,
        stale_for: float = 1.0,
        wait_timeout: float = 0.5,
        metrics: Any = None,
        report_demand: bool = True,
        report_interval: float = DEFAULT_INTERVAL,
        auth: MessageAuth | None = None,
        daemon_db: int = 0,
        consistency: Consistency = "available",
    ) -> None:
        # Any: the redis stubs lack the asyncio RedisCluster commands
        self.client: Any = cast(Any, client)
        self._owns_client = False
        self._owns_subscriber = subscriber is None
        if subscriber is None:
            subscriber = AsyncSubscriber(
                client, namespace=namespace, clock=clock, auth=auth, daemon_db=daemon_db
            )
        self.subscriber = subscriber
        self.hotset: HotSet = subscriber.hotset
        self.clock = self.hotset.clock
        self.local = LocalCache(
            max_entries, max_bytes, clock=self.clock, stale_for=stale_for, wait_timeout=wait_timeout
        )
        self.max_ttl = max_ttl
        self.origin = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._channel = subscriber.namespace.invalidate_channel
        self._db = client_db(client)
        self._cluster = is_cluster(client)  # a cluster pipeline cannot PUBLISH
        self._publish_cmd = publish_command(subscriber.namespace.sharded)
        self._hot = self.hotset.items
        # db 0 looks keys up by their bytes, other dbs by (key, db): see hotset.ident
        self._hot_get = hot_lookup(self._hot, self._db)
        self._demand: AsyncDemandReporter | None = None
        if report_demand:
            counter = DemandCounter(
                self.hotset,
                self.origin,
                subscriber.namespace,
                self.clock,
                interval=report_interval,
            )
            self._demand = AsyncDemandReporter(
                counter, functools.partial(apublish, client, sharded=subscriber.namespace.sharded)
            )
        self._futures: dict[Hashable, asyncio.Future[Any]] = {}
        self.bad_invalidations = 0
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

    async def start(self, timeout: float = START_TIMEOUT_MS / 1000) -> AsyncHotCache:
        """Start the subscriber and wait until the hot set is bootstrapped."""
        await self.subscriber.start()
        if not await self.subscriber.wait_ready(timeout):
            cause = start_failure(self.subscriber, timeout)
            await self.close()  # stop what failed: the subscriber it owns, its own client
            raise cause
        if self._demand is not None and self.hotset.demand_owner in (None, self):
            self.hotset.demand_owner = self
            self._demand.start()
        return self

    async def close(self) -> None:
        """Stop the subscriber if this cache created it (not the client)."""
        if self._demand is not None and self.hotset.demand_owner is self:
            await self._demand.stop()
            self.hotset.demand_owner = None
        if self._owns_subscriber:
            await self.subscriber.stop()
        if self._owns_client:
            await self.client.aclose()

    @classmethod
    async def from_url(cls, url: str, **kwargs: Any) -> AsyncHotCache:
        """Create a ``redis.asyncio`` client for ``url``, start, and bootstrap.

        A Redis Cluster node in ``url`` makes an asyncio ``RedisCluster``. The client
        is closed by :meth:`close`, and at once when the start fails.
        """
        cache = cls(await aclient_from_url(url), **kwargs)
        cache._owns_client = True
        return await cache.start()

    async def __aenter__(self) -> AsyncHotCache:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def stats(self) -> CacheStats:
        return self.local.stats

    @property
    def demand_stats(self) -> DemandStats | None:
        """Counters of the demand reports this cache sends (None when it sends none)."""
        if self._demand is None or self.hotset.demand_owner is not self:
            return None
        return self._demand.stats

    async def flush_demand(self) -> int:
        """Send the pending demand reports now (returns messages sent)."""
        if self._demand is None or self.hotset.demand_owner is not self:
            return 0
        return await self._demand.flush()

    # -------------------------------------------------------------------- reads
    async def mget(self, keys: Any, *args: Any) -> list[Any]:
        """MGET; hot keys come from the local cache (single-flight), the rest in one MGET."""
        names = [*keys, *args] if isinstance(keys, (list, tuple)) else [keys, *args]
        kbs = [n if n.__class__ is bytes else key_bytes(n) for n in names]
        hot = [i for i, kb in enumerate(kbs) if self._hot_get(kb) is not None]
        if not hot:
            return list(await self._mget(names))
        out: list[Any] = [None] * len(names)
        hot_set = set(hot)
        cold = [i for i in range(len(names)) if i not in hot_set]
        if cold:
            for i, v in zip(cold, await self._mget([names[i] for i in cold]), strict=True):
                out[i] = v
        for i, v in zip(hot, await asyncio.gather(*(self.get(names[i]) for i in hot)), strict=True):
            out[i] = v
        return out

    async def _mget(self, names: list[Any]) -> Any:
        if self._cluster:  # keys of several slots: one MGET per node
            return await self.client.mget_nonatomic(names)
        return await self.client.mget(names)

    async def get(self, name: Any) -> Any:
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return await self.client.get(name)
        return await self._hot_read(item, ("g", k), k, "GET", name)

    async def hget(self, name: Any, key: Any) -> Any:
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return await self.client.hget(name, key)
        return await self._hot_read(item, ("h", k, key_bytes(key)), k, "HGET", name, key)

    async def hgetall(self, name: Any) -> Any:
        k = name if name.__class__ is bytes else key_bytes(name)
        item = self._hot_get(k)
        if item is None:
            return await self.client.hgetall(name)
        return dict(await self._hot_read(item, ("H", k), k, "HGETALL", name))

    async def cached(
        self, key: Any, loader: Callable[[], Awaitable[T]], ttl: float | None = None
    ) -> T:
        """``await loader()`` cached while ``key`` is hot, single-flight."""
        k = key if key.__class__ is bytes else key_bytes(key)
        item = self._hot_get(k)
        if item is None or item.expires <= self.clock.monotonic():
            return await loader()
        result: T = await self._counted(
            item, ("c", k), k, loader, self._ttl(item) if ttl is None else ttl
        )
        return result

    async def _hot_read(
        self, item: HotItem, ckey: Hashable, k: bytes, command: str, *args: Any
    ) -> Any:
        now = self.clock.monotonic()
        if item.expires <= now or item.entry.db != self._db:
            return await self.client.execute_command(command, *args)
        if self.gate.admit(ckey, k, now):
            hit, value = self.local.get_fresh(ckey, now)
            if hit:
                item.served += 1
                return value
        if not self.gate.before_fetch(ckey, k, self._db, now):
            return await self.client.execute_command(command, *args)  # strict and unwatched
        return await self._counted(
            item, ckey, k, lambda: self.client.execute_command(command, *args), self._ttl(item)
        )

    async def _counted(
        self,
        item: HotItem,
        ckey: Hashable,
        k: bytes,
        read: Callable[[], Awaitable[Any]],
        ttl: float,
    ) -> Any:
        """:meth:`_load`; a read answered without calling ``read`` was served locally."""
        went = False

        def loader() -> Awaitable[Any]:
            nonlocal went
            went = True
            return read()

        value = await self._load(ckey, k, loader, ttl)
        if not went:
            item.served += 1
        return value

    async def _load(
        self, ckey: Hashable, k: bytes, loader: Callable[[], Awaitable[Any]], ttl: float
    ) -> Any:
        now = self.clock.monotonic()
        hit, value = self.local.get_fresh(ckey, now)
        if hit:
            return value
        fut = self._futures.get(ckey)
        if fut is not None:  # a refresh is in flight on this loop: follow it
            peek = self.local.peek(ckey)
            if peek is not None and now < peek[1] + self.local.stale_for:
                self.local.stats.stale_hits += 1
                return peek[0]
            self.local.stats.waits += 1
            try:
                value = await asyncio.wait_for(asyncio.shield(fut), self.local.wait_timeout)
            except asyncio.TimeoutError:
                return await loader()  # leader too slow: read through, uncached
            return await loader() if value is _RETRY else value
        flight, entry = self.local.begin(ckey, k, now)
        if flight is None:  # fresh meanwhile, or a thread of another loop refreshes it
            if entry is not None and now < entry.expires + self.local.stale_for:
                return entry.value
            return await loader()
        fut = asyncio.get_running_loop().create_future()
        self._futures[ckey] = fut
        try:
            value = await loader()
        except Exception as exc:
            self.local.fail(flight, exc)
            fut.set_exception(exc)  # followers see the leader's error: no retry storm
            fut.exception()  # mark retrieved: there may be no follower
            raise
        except BaseException as exc:  # leader cancelled: followers read for themselves
            self.local.fail(flight, exc)
            fut.set_result(_RETRY)
            raise
        finally:
            self._futures.pop(ckey, None)
        self.local.finish(flight, value, ttl)
        fut.set_result(value)
        return value

    def _ttl(self, item: HotItem) -> float:
        ttl = item.entry.ttl_ms / 1000.0
        return ttl if self.max_ttl is None else min(ttl, self.max_ttl)

    # ------------------------------------------------------------------- writes
    async def set(self, name: Any, value: Any, **kwargs: Any) -> Any:
        return await self._write((name,), lambda p: p.set(name, value, **kwargs))

    async def delete(self, *names: Any) -> Any:
        return await self._write(names, lambda p: p.delete(*names))

    async def incrby(self, name: Any, amount: int = 1) -> Any:
        return await self._write((name,), lambda p: p.incrby(name, amount))

    incr = incrby

    async def decrby(self, name: Any, amount: int = 1) -> Any:
        return await self._write((name,), lambda p: p.decrby(name, amount))

    decr = decrby

    async def hset(self, name: Any, key: Any = None, value: Any = None, mapping: Any = None) -> Any:
        return await self._write((name,), lambda p: p.hset(name, key, value, mapping=mapping))

    async def hdel(self, name: Any, *keys: Any) -> Any:
        return await self._write((name,), lambda p: p.hdel(name, *keys))

    async def expire(self, name: Any, time: Any, **kwargs: Any) -> Any:
        return await self._write((name,), lambda p: p.expire(name, time, **kwargs))

    def __getattr__(self, name: str) -> Any:
        """Any other ``redis.asyncio`` command; writes to strings, hashes or keys invalidate."""
        return pass_through(self.client, name, self._write)

    def pipeline(self, transaction: bool = True) -> AsyncInvalidatingPipeline:
        """A pipeline whose writes invalidate their keys when it executes."""
        pipe = self.client.pipeline(transaction=transaction)
        return AsyncInvalidatingPipeline(pipe, make_flush(self))

    async def invalidate(self, *names: Any) -> None:
        """Drop ``names`` here and broadcast their invalidation."""
        kbs = [key_bytes(n) for n in names]
        payload = self._payload(kbs)
        await self.client.execute_command(self._publish_cmd, self._channel, payload)
        for kb in kbs:
            self.local.invalidate(kb)

    async def _write(self, names: tuple[Any, ...], add: Callable[[Any], Any]) -> Any:
        kbs = [key_bytes(n) for n in names]
        payload = self._payload(kbs)
        try:
            if self._cluster:  # the write goes to its slot's node, the invalidation after it
                result = await add(self.client)
                await self.client.execute_command(self._publish_cmd, self._channel, payload)
                return result
            async with self.client.pipeline(transaction=False) as pipe:
                add(pipe)
                pipe.execute_command(self._publish_cmd, self._channel, payload)
                return (await pipe.execute())[0]
        finally:
            for kb in kbs:
                self.local.invalidate(kb)

    @property
    def watch_stats(self) -> WatchStats:
        """Heartbeats heard, epoch changes, lapses, strict-mode misses."""
        return self.gate.stats

    def _payload(self, kbs: list[bytes]) -> bytes:
        payload = encode_invalidation(self.origin, kbs)
        return payload if self.gate.auth is None else self.gate.auth.sign(payload)

    def _on_invalidation(self, payload: bytes) -> None:
        if not self.gate.on_invalidation(payload):
            self.bad_invalidations += 1
