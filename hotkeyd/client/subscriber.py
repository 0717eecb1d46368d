"""Keep a :class:`HotSet` current from the daemon's channel (thread + redis-py).

Start-up order closes the race between snapshot and stream: **subscribe first**, wait
for the confirmation, **then** read the snapshots; messages published meanwhile sit in
the subscription buffer and are applied afterwards, where every one with
``seq <= snapshot seq`` is simply stale. The same order runs after every reconnect,
and local caches are told to drop everything then (invalidations may have been missed
while disconnected).

A gap in one instance's ``seq`` (a lost message) triggers a resync of that instance
from its snapshot; if the snapshot cannot close the gap either, the message is applied
anyway and the TTLs heal whatever was missed (hot keys are re-announced within a TTL).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis

from hotkeyd.backoff import Backoff
from hotkeyd.client.hotset import ApplyResult, HotSet
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.errors import ClientError
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.wire import Message, Namespace, WireError

__all__ = ["Subscriber", "SubscriberCore", "SubscriberStats", "read_snapshots"]

logger = logging.getLogger(__name__)

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


@dataclass
class SubscriberStats:
    """Counters of one subscriber (read them in tests and dashboards)."""

    messages: int = 0
    applied: int = 0
    stale: int = 0
    gaps: int = 0
    gaps_unrecovered: int = 0
    resyncs: int = 0
    connects: int = 0
    reconnects: int = 0
    bad_messages: int = 0
    invalidations: int = 0


def _text(v: bytes | str) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def snapshot_ids(members: Iterable[bytes | str]) -> list[str]:
    """Instance ids from a ``ZRANGEBYSCORE {<prefix>}:instances`` reply."""
    return [_text(m) for m in members]


def parse_snapshots(
    ids: list[str], raws: list[Any], stats: SubscriberStats, warn: RateLimitedLog
) -> list[Message]:
    """Parse snapshot values; a corrupt one is counted and skipped, never fatal."""
    out = []
    for inst, raw in zip(ids, raws, strict=True):
        if raw is None:
            continue
        try:
            msg = Message.loads(raw)
        except WireError as exc:
            stats.bad_messages += 1
            warn(logging.WARNING, "corrupt snapshot of instance %s: %s", inst, exc)
            continue
        out.append(msg if msg.full else Message(**{**_fields(msg), "full": True}))
    return out


def _fields(msg: Message) -> dict[str, Any]:
    return {
        n: getattr(msg, n) for n in ("instance", "seq", "ts", "hot", "cool", "full", "final", "top")
    }


def read_snapshots(
    client: redis.Redis,
    namespace: Namespace,
    clock: Clock,
    *,
    stale_after: float = 30.0,
    instances: list[str] | None = None,
) -> list[Message]:
    """Read the snapshots of live instances (heartbeat within ``stale_after`` s).

    One ZRANGEBYSCORE plus one pipelined GET per instance (not MGET: the snapshot
    keys live in different cluster slots).
    """
    stats = SubscriberStats()
    if instances is None:
        instances = snapshot_ids(
            client.zrangebyscore(namespace.instances, clock.time() - stale_after, "+inf")
        )
    if not instances:
        return []
    pipe = client.pipeline(transaction=False)
    for inst in instances:
        pipe.get(namespace.snapshot(inst))
    return parse_snapshots(instances, pipe.execute(), stats, RateLimitedLog(logger))


class SubscriberCore:
    """The I/O-free half of a subscriber, shared by the thread and asyncio versions."""

    def __init__(
        self,
        hotset: HotSet | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        stale_after: float = 30.0,
        backoff: tuple[float, float] = (0.05, 5.0),
        expire_interval: float = 0.05,
        resync_interval: float | None = 60.0,
    ) -> None:
        if clock is None:
            clock = hotset.clock if hotset is not None else SystemClock()
        namespace = namespace or Namespace()
        self.hotset = hotset if hotset is not None else HotSet(clock)
        self.namespace = namespace
        self.clock = clock
        self.stale_after = stale_after
        self.backoff = Backoff(*backoff)
        self.expire_interval = expire_interval
        self.resync_interval = resync_interval
        self.connected = False
        self.stats = SubscriberStats()
        self.warn = RateLimitedLog(logger)
        self.channels = (namespace.channel, namespace.invalidate_channel)
        self._inval: list[Callable[[bytes], None]] = []
        self._reset: list[Callable[[], None]] = []

    def add_invalidation_listener(self, fn: Callable[[bytes], None]) -> None:
        """``fn(payload)`` for each message on the invalidation channel."""
        self._inval.append(fn)

    def add_reset_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` after every (re)subscription: invalidations may have been missed."""
        self._reset.append(fn)

    def on_subscribed(self) -> None:
        self.stats.connects += 1
        if self.stats.connects > 1:
            self.stats.reconnects += 1
        for fn in list(self._reset):
            try:
                fn()
            except Exception:
                self.warn(logging.ERROR, "reset listener %r failed", fn, exc_info=True)

    def apply_snapshots(self, msgs: list[Message]) -> None:
        self.stats.resyncs += 1
        for m in msgs:
            self.hotset.apply(m)

    def parse(self, data: Any) -> Message | None:
        self.stats.messages += 1
        try:
            return Message.loads(data)
        except WireError as exc:
            self.stats.bad_messages += 1
            self.warn(logging.WARNING, "bad notification on %s: %s", self.namespace.channel, exc)
            return None

    def on_event(self, msg: Message) -> bool:
        """Apply ``msg``; True means: resync ``msg.instance``, then :meth:`after_resync`."""
        res = self.hotset.apply(msg)
        if res is ApplyResult.GAP:
            if self.hotset.last_seq(msg.instance) is not None:
                self.stats.gaps += 1
            return True
        self._count(res)
        return False

    def after_resync(self, msg: Message, snapshots: list[Message]) -> None:
        self.apply_snapshots(snapshots)
        res = self.hotset.apply(msg)
        if res is ApplyResult.GAP:  # the snapshot lags too: accept, TTLs heal the rest
            self.stats.gaps_unrecovered += 1
            res = self.hotset.apply(msg, force=True)
        self._count(res)

    def on_invalidation(self, data: Any) -> None:
        self.stats.invalidations += 1
        payload = data if isinstance(data, bytes) else str(data).encode("utf-8")
        for fn in list(self._inval):
            try:
                fn(payload)
            except Exception:
                self.warn(logging.ERROR, "invalidation listener %r failed", fn, exc_info=True)

    def _count(self, res: ApplyResult) -> None:
        if res is ApplyResult.APPLIED:
            self.stats.applied += 1
        else:
            self.stats.stale += 1


class Subscriber(SubscriberCore):
    """Background thread that feeds a :class:`HotSet` from Redis pub/sub.

    Args:
        client: a redis-py client (AUTH/ACL/TLS come with it); the subscription uses
            its own connection from the client's pool.
        hotset: the set to keep current (a new one on ``clock`` by default).
        namespace: Redis names of the deployment.
        clock: time source for TTLs and the instances' heartbeat age.
        stale_after: ignore instances whose heartbeat is older than this (s).
        backoff: (first, max) reconnect delay in seconds, jittered.
        expire_interval: how often TTL expiry runs (s).
        resync_interval: periodic full resync from the snapshots (s), None to disable.
    """

    def __init__(
        self,
        client: redis.Redis,
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
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Subscriber:
        """Start the background thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="hotkeyd-subscriber", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close the subscription."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until subscribed and bootstrapped from the snapshot (True) or timeout."""
        return self._ready.wait(timeout)

    def __enter__(self) -> Subscriber:
        self.start()
        if not self.wait_ready(10.0):
            self.stop()
            raise ClientError("subscriber could not subscribe and bootstrap within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- resync
    def resync(self, instance: str | None = None) -> list[Message]:
        """Read snapshots (all live instances, or one) from Redis."""
        return read_snapshots(
            self.client,
            self.namespace,
            self.clock,
            stale_after=self.stale_after,
            instances=None if instance is None else [instance],
        )

    # ------------------------------------------------------------------- loop
    def _run(self) -> None:
        while not self._stop.is_set():
            ps = None
            try:
                ps = self.client.pubsub(ignore_subscribe_messages=False)
                ps.subscribe(*self.channels)
                self._await_subscribed(ps)
                self._bootstrap()
                self.backoff.reset()
                self._pump(ps)
            except _CONN_ERRORS as exc:
                self.connected = False
                self.warn(logging.WARNING, "hotkeyd subscription lost (%s); reconnecting", exc)
            except Exception:
                self.connected = False
                self.warn(logging.ERROR, "hotkeyd subscriber failed; restarting", exc_info=True)
            finally:
                if ps is not None:
                    with contextlib.suppress(Exception):  # a dead socket must not stop us
                        ps.close()
            if not self._stop.is_set():
                self._stop.wait(self.backoff.next_delay())
        self.connected = False

    def _await_subscribed(self, ps: Any) -> None:
        pending = set(self.channels)
        deadline = time.monotonic() + 5.0  # an I/O timeout: real time, not the TTL clock
        while pending:
            if self._stop.is_set():
                return
            m = ps.get_message(timeout=0.1)
            if m is not None and m["type"] == "subscribe":
                pending.discard(_text(m["channel"]))
            if time.monotonic() > deadline and pending:
                raise redis.ConnectionError(f"no subscribe confirmation for {sorted(pending)}")

    def _bootstrap(self) -> None:
        self.on_subscribed()
        self.apply_snapshots(self.resync())
        self.connected = True
        self._ready.set()

    def _pump(self, ps: Any) -> None:
        next_expire = next_resync = self.clock.monotonic()
        if self.resync_interval:
            next_resync += self.resync_interval
        events = self.namespace.channel
        while not self._stop.is_set():
            m = ps.get_message(timeout=0.05)
            if m is not None:
                kind = m["type"]
                if kind == "message":
                    if _text(m["channel"]) == events:
                        self._on_data(m["data"])
                    else:
                        self.on_invalidation(m["data"])
                elif kind == "subscribe" and _text(m["channel"]) == events:
                    # redis-py reconnected and resubscribed under us: bootstrap again.
                    self._bootstrap()
            now = self.clock.monotonic()
            if now >= next_expire:
                self.hotset.expire()
                next_expire = now + self.expire_interval
            if self.resync_interval and now >= next_resync:
                self.apply_snapshots(self.resync())
                next_resync = now + self.resync_interval

    def _on_data(self, data: Any) -> None:
        msg = self.parse(data)
        if msg is not None and self.on_event(msg):
            self.after_resync(msg, self.resync(msg.instance))
