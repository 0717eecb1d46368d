"""AsyncSubscriber: the asyncio twin of :class:`~hotkeyd.client.subscriber.Subscriber`.

Same protocol (subscribe, confirm, snapshot, then buffered messages; resync on gaps,
reconnect with backoff and bootstrap again), same :class:`HotSet`, driven by a task on
``redis.asyncio``. The sequence logic lives in
:class:`~hotkeyd.client.subscriber.SubscriberCore`, shared with the thread version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis

from hotkeyd.client.hotset import HotSet
from hotkeyd.client.snapshots import afetch_snapshots
from hotkeyd.client.subscriber import Liveness, SubscriberCore
from hotkeyd.clock import Clock
from hotkeyd.conn.cluster import AnyAsyncRedis, AsyncRedisCluster, dedicated_client
from hotkeyd.conn.redis import REDIS_ERRORS, translate_redis_error
from hotkeyd.errors import ClientError, HotkeydError, UnreachableError
from hotkeyd.protocol import limits
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Message, Namespace

__all__ = ["AsyncSubscriber"]

logger = logging.getLogger(__name__)

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError, UnreachableError)


class AsyncSubscriber(SubscriberCore):
    """A task that feeds a :class:`HotSet` from Redis pub/sub with ``redis.asyncio``.

    Args mirror :class:`~hotkeyd.client.subscriber.Subscriber`. Callbacks of the hot
    set and listeners run inside the event loop: keep them short and non-blocking.
    """

    def __init__(
        self,
        client: AnyAsyncRedis,
        hotset: HotSet | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        stale_after: float = float(limits.INSTANCE_MAX_AGE_S),
        backoff: tuple[float, float] = (0.05, 5.0),
        expire_interval: float = 0.05,
        resync_interval: float | None = 60.0,
        auth: MessageAuth | None = None,
        daemon_db: int = 0,
        health_interval: float | None = 5.0,
    ) -> None:
        super().__init__(
            hotset,
            namespace=namespace,
            clock=clock,
            stale_after=stale_after,
            backoff=backoff,
            expire_interval=expire_interval,
            resync_interval=resync_interval,
            auth=auth,
            health_interval=health_interval,
        )
        self.client = client
        self.daemon_db = daemon_db
        self._own: Any = None  # the subscription's own client (dedicated_client)
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stopping = False

    async def start(self) -> AsyncSubscriber:
        """Start the task (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self.error = None
            self._task = asyncio.create_task(self._run(), name="hotkeyd-async-subscriber")
        return self

    async def stop(self) -> None:
        """Cancel the task and close the subscription."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_own()

    async def _close_own(self) -> None:
        own, self._own = self._own, None
        if own is not None and own is not self.client:
            with contextlib.suppress(Exception):
                await own.aclose()

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until subscribed and bootstrapped (True), timeout or a fatal error."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._ready.is_set():
            if self.error is not None or (self._task is not None and self._task.done()):
                return False
            left = 0.05 if deadline is None else min(0.05, deadline - loop.time())
            if left <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), left)
        return True

    async def __aenter__(self) -> AsyncSubscriber:
        await self.start()
        if not await self.wait_ready(10.0):
            await self.stop()
            raise ClientError("async subscriber could not subscribe and bootstrap within 10 s")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def resync(self, instance: str | None = None) -> list[Message]:
        """Read snapshots (all live instances, or one)."""
        snaps = await afetch_snapshots(
            self._client(),
            self.namespace,
            clock=self.clock,
            max_age=self.stale_after,
            instances=None if instance is None else [instance],
            on_bad=self.on_bad_snapshot,
            auth=self.auth,
        )
        return list(snaps.values())

    def _client(self) -> Any:
        if self._own is None:
            self._own = dedicated_client(self.client, db=self.daemon_db)
        return self._own

    async def _run(self) -> None:
        while not self._stopping:
            ps: Any = None  # Any: the redis stubs lag redis-py 5+ (aclose, ssubscribe)
            try:
                if isinstance(self.client, AsyncRedisCluster):
                    await self.client.initialize()  # its pubsub needs the slot map (idempotent)
                ps = self._client().pubsub(ignore_subscribe_messages=False)
                if self.namespace.sharded:
                    await ps.ssubscribe(*self.channels)
                else:
                    await ps.subscribe(*self.channels)
                await self._await_subscribed(ps)
                await self._bootstrap()
                self.backoff.reset()
                await self._pump(ps)
            except _CONN_ERRORS as exc:
                self.connected = False
                self.last_error = str(exc)
                self.warn(logging.WARNING, "hotkeyd subscription lost (%s); reconnecting", exc)
            except asyncio.CancelledError:
                raise
            except (*REDIS_ERRORS, HotkeydError) as exc:
                self.connected = False
                err = translate_redis_error(exc)
                self.last_error = str(err)
                if not self._ready.is_set() and not isinstance(err, UnreachableError):
                    self.error = err  # retrying cannot fix it: fail the start
                    logger.error("hotkeyd async subscriber cannot start: %s", err)
                    await self._close_own()
                    return
                self.warn(logging.ERROR, "hotkeyd async subscriber: %s; retrying", err)
            except Exception:
                self.connected = False
                self.warn(
                    logging.ERROR, "hotkeyd async subscriber failed; restarting", exc_info=True
                )
            finally:
                if ps is not None:
                    with contextlib.suppress(Exception):
                        await ps.aclose()
            if not self._stopping:
                self.on_lost()
                await asyncio.sleep(self.backoff.next_delay())

    async def _get(self, ps: Any, timeout: float) -> Any:
        if self.namespace.sharded and hasattr(ps, "get_sharded_message"):  # cluster
            return await ps.get_sharded_message(timeout=timeout)
        return await ps.get_message(timeout=timeout)

    async def _await_subscribed(self, ps: Any) -> None:
        pending = set(self.channels)
        deadline = time.monotonic() + 5.0
        while pending:
            m = await self._get(ps, 0.1)
            if m is not None and m["type"] == self.subscribe_type:
                ch = m["channel"]
                pending.discard(ch.decode() if isinstance(ch, bytes) else ch)
            if pending and time.monotonic() > deadline:
                raise redis.ConnectionError(f"no subscribe confirmation for {sorted(pending)}")

    async def on_message(self, data: Any) -> None:
        """Handle one message of the events channel, as the subscription does with each:
        parse it, apply it, and on a sequence gap read its instance's snapshot from Redis,
        apply that, then the message. Bad input is counted and logged, never raised.
        """
        msg = self.parse(data)
        if msg is not None and self.on_event(msg):
            self.after_resync(msg, await self.resync(msg.instance))

    async def _bootstrap(self) -> None:
        self.on_subscribed()
        self.apply_snapshots(await self.resync())
        self.connected = True
        self._ready.set()

    async def _pump(self, ps: Any) -> None:
        next_expire = next_resync = self.clock.monotonic()
        if self.resync_interval:
            next_resync += self.resync_interval
        events = self.namespace.channel
        live = Liveness(self.health_interval, can_ping=not self.namespace.sharded)
        while not self._stopping:
            m = await self._get(ps, 0.05)
            if live.after(m is not None):
                await ps.ping()
            if m is not None:
                ch = m["channel"]
                ch = ch.decode("utf-8", "replace") if isinstance(ch, bytes) else ch
                if m["type"] == self.message_type:
                    if ch == events:
                        await self.on_message(m["data"])
                    elif ch == self.namespace.watch_channel:
                        self.on_heartbeat(m["data"])
                    else:
                        self.on_invalidation(m["data"])
                elif m["type"] == self.subscribe_type and ch in self.channels:
                    await self._bootstrap()  # redis-py resubscribed: messages may be lost
            now = self.clock.monotonic()
            if now >= next_expire:
                self.hotset.expire()
                next_expire = now + self.expire_interval
            if self.resync_interval and now >= next_resync:
                self.apply_snapshots(await self.resync())
                next_resync = now + self.resync_interval
