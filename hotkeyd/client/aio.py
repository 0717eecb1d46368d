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
import redis.asyncio as aredis

from hotkeyd.client.hotset import HotSet
from hotkeyd.client.subscriber import SubscriberCore, parse_snapshots, snapshot_ids
from hotkeyd.clock import Clock
from hotkeyd.errors import ClientError
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.wire import Message, Namespace

__all__ = ["AsyncSubscriber", "aread_snapshots"]

logger = logging.getLogger(__name__)

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


async def aread_snapshots(
    client: aredis.Redis,
    namespace: Namespace,
    clock: Clock,
    *,
    stale_after: float = 30.0,
    instances: list[str] | None = None,
) -> list[Message]:
    """Async version of :func:`~hotkeyd.client.subscriber.read_snapshots`."""
    from hotkeyd.client.subscriber import SubscriberStats

    if instances is None:
        members = await client.zrangebyscore(
            namespace.instances, clock.time() - stale_after, "+inf"
        )
        instances = snapshot_ids(members)
    if not instances:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for inst in instances:
            pipe.get(namespace.snapshot(inst))
        raws = await pipe.execute()
    return parse_snapshots(instances, raws, SubscriberStats(), RateLimitedLog(logger))


class AsyncSubscriber(SubscriberCore):
    """A task that feeds a :class:`HotSet` from Redis pub/sub with ``redis.asyncio``.

    Args mirror :class:`~hotkeyd.client.subscriber.Subscriber`. Callbacks of the hot
    set and listeners run inside the event loop: keep them short and non-blocking.
    """

    def __init__(
        self,
        client: aredis.Redis,
        hotset: HotSet | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        stale_after: float = 30.0,
        backoff: tuple[float, float] = (0.05, 5.0),
        expire_interval: float = 0.05,
        resync_interval: float | None = 60.0,
    ) -> None:
        super().__init__(
            hotset,
            namespace=namespace,
            clock=clock,
            stale_after=stale_after,
            backoff=backoff,
            expire_interval=expire_interval,
            resync_interval=resync_interval,
        )
        self.client = client
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stopping = False

    async def start(self) -> AsyncSubscriber:
        """Start the task (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
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

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until subscribed and bootstrapped (True) or timeout (False)."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            return False
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
        return await aread_snapshots(
            self.client,
            self.namespace,
            self.clock,
            stale_after=self.stale_after,
            instances=None if instance is None else [instance],
        )

    async def _run(self) -> None:
        while not self._stopping:
            ps = self.client.pubsub(ignore_subscribe_messages=False)
            try:
                await ps.subscribe(*self.channels)
                await self._await_subscribed(ps)
                await self._bootstrap()
                self.backoff.reset()
                await self._pump(ps)
            except _CONN_ERRORS as exc:
                self.connected = False
                self.warn(logging.WARNING, "hotkeyd subscription lost (%s); reconnecting", exc)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.connected = False
                self.warn(
                    logging.ERROR, "hotkeyd async subscriber failed; restarting", exc_info=True
                )
            finally:
                with contextlib.suppress(Exception):
                    await ps.aclose()  # type: ignore[attr-defined]
            if not self._stopping:
                await asyncio.sleep(self.backoff.next_delay())

    async def _await_subscribed(self, ps: Any) -> None:
        pending = set(self.channels)
        deadline = time.monotonic() + 5.0
        while pending:
            m = await ps.get_message(timeout=0.1)
            if m is not None and m["type"] == "subscribe":
                ch = m["channel"]
                pending.discard(ch.decode() if isinstance(ch, bytes) else ch)
            if pending and time.monotonic() > deadline:
                raise redis.ConnectionError(f"no subscribe confirmation for {sorted(pending)}")

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
        while not self._stopping:
            m = await ps.get_message(timeout=0.05)
            if m is not None:
                ch = m["channel"]
                ch = ch.decode("utf-8", "replace") if isinstance(ch, bytes) else ch
                if m["type"] == "message":
                    if ch == events:
                        msg = self.parse(m["data"])
                        if msg is not None and self.on_event(msg):
                            self.after_resync(msg, await self.resync(msg.instance))
                    else:
                        self.on_invalidation(m["data"])
                elif m["type"] == "subscribe" and ch == events:
                    await self._bootstrap()  # redis-py reconnected and resubscribed
            now = self.clock.monotonic()
            if now >= next_expire:
                self.hotset.expire()
                next_expire = now + self.expire_interval
            if self.resync_interval and now >= next_resync:
                self.apply_snapshots(await self.resync())
                next_resync = now + self.resync_interval
