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

The channel is untrusted input. Content never makes the subscriber reconnect or flush
the caches: a message larger than ``max_message_bytes`` or off the format is counted
(``bad_messages``) and dropped; a bad entry is left out and counted (``bad_entries``);
a ``ts`` more than ``max_clock_skew`` seconds in the future, or a ``seq`` more than the
hot set's ``max_seq_jump`` (1,000) ahead of the instance's snapshot (which the daemon
writes before each message), is *suspect* (counted in ``suspect``, dropped): adopting it would mute the real daemon
until it restarts.
With ``auth`` (:class:`~hotkeyd.protocol.auth.MessageAuth`) only messages signed with the shared
key are read at all (``unsigned`` counts the rest).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from hotkeyd.backoff import Backoff
from hotkeyd.client.forksafe import track_fork
from hotkeyd.client.hotset import ApplyResult, HotSet
from hotkeyd.client.snapshots import fetch_snapshots
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.cluster import AnyRedis, dedicated_client
from hotkeyd.conn.redis import REDIS_ERRORS, translate_redis_error
from hotkeyd.errors import ClientError, HotkeydError, UnreachableError
from hotkeyd.protocol import limits
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Message, Namespace, WireError
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["Subscriber", "SubscriberCore", "SubscriberStats", "start_failure"]

logger = logging.getLogger(__name__)

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError, UnreachableError)


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
    lost: int = 0  # subscriptions lost; each dropped every local copy (spec/failure.md)
    # wall time (time.time()) of the last valid notification; 0.0 never. A daemon that
    # stopped shows as a growing age while its keys live out their TTL.
    last_notification: float = 0.0
    bad_messages: int = 0
    bad_entries: int = 0
    bad_snapshots: int = 0
    suspect: int = 0
    refused: int = 0
    unsigned: int = 0
    invalidations: int = 0


def _text(v: bytes | str) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def start_failure(sub: SubscriberCore, timeout: float) -> HotkeydError:
    """The exception a failed start raises: the real cause, in one line."""
    if sub.error is not None:
        return sub.error
    why = sub.last_error or "no reply from Redis"
    return UnreachableError(f"hot-key subscriber not ready after {timeout:g} s: {why}")


class SubscriberCore:
    """The I/O-free half of a subscriber, shared by the thread and asyncio versions."""

    def __init__(
        self,
        hotset: HotSet | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        stale_after: float = float(limits.INSTANCE_MAX_AGE_S),
        backoff: tuple[float, float] = (0.05, 5.0),
        expire_interval: float = 0.05,
        resync_interval: float | None = 60.0,
        health_interval: float | None = 5.0,
        max_message_bytes: int = limits.MESSAGE_BYTES_MAX,
        max_entries: int = limits.MESSAGE_ENTRIES_MAX,
        max_clock_skew: float = float(limits.CLOCK_SKEW_S_MAX),
        auth: MessageAuth | None = None,
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
        self.health_interval = health_interval
        self.max_message_bytes = max_message_bytes
        self.max_entries = max_entries
        self.max_clock_skew = max_clock_skew
        self.auth = auth
        self.connected = False
        self.stats = SubscriberStats()
        self.error: HotkeydError | None = None  # why the start failed for good
        self.last_error: str | None = None  # the latest failure, for messages
        self.warn = RateLimitedLog(logger)
        # The watch's heartbeats (docs/consistency.md) drive strict mode and count lapses.
        # Invalidations first: on a cluster, redis-py subscribes on the node that owns the
        # first channel's slot, where the daemon and the SDKs publish (a message published
        # on another node crosses the cluster bus: up to 40 ms more, see pubsub_node).
        self.channels = (namespace.invalidate_channel, namespace.channel, namespace.watch_channel)
        # Sharded pub/sub (SSUBSCRIBE) confirms with "ssubscribe" and delivers "smessage";
        # after a slot migration redis-py subscribes again on the new owner.
        sharded = namespace.sharded
        self.subscribe_type = "ssubscribe" if sharded else "subscribe"
        self.message_type = "smessage" if sharded else "message"
        self._inval: list[Callable[[bytes], None]] = []
        self._beats: list[Callable[[bytes], None]] = []
        self._reset: list[Callable[[], None]] = []

    def add_invalidation_listener(self, fn: Callable[[bytes], None]) -> None:
        """``fn(payload)`` for each message on the invalidation channel."""
        self._inval.append(fn)

    def add_heartbeat_listener(self, fn: Callable[[bytes], None]) -> None:
        """``fn(payload)`` for each message on the watch channel (heartbeats)."""
        self._beats.append(fn)

    def on_heartbeat(self, data: Any) -> None:
        payload = data if isinstance(data, bytes) else str(data).encode("utf-8")
        for fn in list(self._beats):
            try:
                fn(payload)
            except Exception:
                self.warn(logging.ERROR, "heartbeat listener %r failed", fn, exc_info=True)

    def add_reset_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` after every (re)subscription: invalidations may have been missed."""
        self._reset.append(fn)

    def on_subscribed(self) -> None:
        self.stats.connects += 1
        if self.stats.connects > 1:
            self.stats.reconnects += 1
        self._run_resets()

    def on_lost(self) -> None:
        """The subscription is gone and may miss invalidations: drop every local copy now,
        not only once resubscribed (spec/failure.md, subscription_lost)."""
        self._run_resets()
        self.stats.lost += 1

    def _run_resets(self) -> None:
        for fn in list(self._reset):
            try:
                fn()
            except Exception:
                self.warn(logging.ERROR, "reset listener %r failed", fn, exc_info=True)

    def on_bad_snapshot(self, instance: str, exc: WireError) -> None:
        self.stats.bad_snapshots += 1
        self.warn(logging.WARNING, "corrupt snapshot of instance %s: %s", instance, exc)

    def apply_snapshots(self, msgs: list[Message]) -> None:
        self.stats.resyncs += 1
        for m in msgs:
            self.hotset.apply(m)

    def parse(self, data: Any) -> Message | None:
        """Validate one message from the channel; None (counted, logged) if it is dropped."""
        self.stats.messages += 1
        channel = self.namespace.channel
        if not isinstance(data, (bytes, str)):
            data = str(data)
        if len(data) > self.max_message_bytes:
            self.stats.bad_messages += 1
            self.warn(
                logging.WARNING,
                "dropped a %d-byte message on %s (max_message_bytes %d)",
                len(data),
                channel,
                self.max_message_bytes,
            )
            return None
        if self.auth is not None:
            body = self.auth.verify(data if isinstance(data, bytes) else data.encode("utf-8"))
            if body is None:
                self.stats.unsigned += 1
                self.warn(logging.WARNING, "dropped an unsigned or forged message on %s", channel)
                return None
            data = body
        try:
            msg = Message.loads(data, max_entries=self.max_entries)
        except WireError as exc:
            self.stats.bad_messages += 1
            self.warn(logging.WARNING, "bad notification on %s: %s", channel, exc)
            return None
        if msg.skipped:
            self.stats.bad_entries += msg.skipped
            self.warn(logging.WARNING, "bad entries left out of a message of %s", msg.instance)
        if msg.ts > self.clock.time() + self.max_clock_skew:
            self._suspect(msg, "its ts is in the future")
            return None
        return msg

    def _suspect(self, msg: Message, why: str) -> None:
        self.stats.suspect += 1
        self.warn(
            logging.WARNING,
            "suspect message for instance %r ignored: %s (seq %d, ts %.0f); forged?",
            msg.instance[:64],
            why,
            msg.seq,
            msg.ts,
        )

    def on_event(self, msg: Message) -> bool:
        """Apply ``msg``; True means: resync ``msg.instance``, then :meth:`after_resync`."""
        self.stats.last_notification = time.time()
        res = self.hotset.apply(msg)
        if res is ApplyResult.GAP:
            if self.hotset.last_seq(msg.instance) is not None:
                self.stats.gaps += 1
            return True
        self._count(res)
        return False

    def after_resync(self, msg: Message, snapshots: list[Message]) -> None:
        self.apply_snapshots(snapshots)
        snap = next((s for s in snapshots if s.instance == msg.instance), None)
        if snap is not None and msg.seq > snap.seq + self.hotset.max_seq_jump:
            # The daemon writes its snapshot before (in the same transaction as) each
            # message, so a real message is never far ahead of the snapshot read after it.
            self._suspect(msg, f"its seq is far ahead of the snapshot's ({snap.seq})")
            return
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
        elif res is ApplyResult.REFUSED:
            self.stats.refused += 1
        else:
            self.stats.stale += 1


class Liveness:
    """When to PING a silent subscription, and when the missing PONG means it is dead.

    A half-open connection (a NAT or proxy that dropped it without a reset) looks like a
    quiet channel forever; after ``interval`` seconds without a message the subscriber
    sends PING, and no reply within ``interval`` more raises ``ConnectionError`` (the
    loop reconnects). I/O-free, shared by the thread and asyncio subscribers; real
    time, not the TTL clock.
    """

    def __init__(self, interval: float | None, *, can_ping: bool = True) -> None:
        self.interval = interval if can_ping else None
        self._heard = time.monotonic()
        self._pinged: float | None = None

    def after(self, got_message: bool) -> bool:
        """Call after each read; True means: send PING now."""
        if not self.interval:
            return False
        t = time.monotonic()
        if got_message:
            self._heard, self._pinged = t, None
        elif self._pinged is not None:
            if t - self._pinged > self.interval:
                raise redis.ConnectionError(
                    f"no PONG within {self.interval:g} s: connection half-open?"
                )
        elif t - self._heard > self.interval:
            self._pinged = t
            return True
        return False


def _can_ping(ps: Any) -> bool:
    """Plain pub/sub answers PING with a pong message; a cluster's sharded one may not."""
    return not getattr(ps, "_sharded", False) and callable(getattr(ps, "ping", None))


class Subscriber(SubscriberCore):
    """Background thread that feeds a :class:`HotSet` from Redis pub/sub.

    Args:
        client: a redis-py client, ``redis.Redis`` or ``redis.cluster.RedisCluster``
            (AUTH/ACL/TLS come with it). The subscription and snapshot reads use a
            pool of their own with the same settings (never the application's pool).
        hotset: the set to keep current (a new one on ``clock`` by default).
        namespace: Redis names of the deployment.
        clock: time source for TTLs and the instances' heartbeat age.
        stale_after: ignore instances whose heartbeat is older than this (s).
        backoff: (first, max) reconnect delay in seconds, jittered.
        expire_interval: how often TTL expiry runs (s).
        resync_interval: periodic full resync from the snapshots (s), None to disable.
        health_interval: after this many seconds without a message the subscription is
            PINGed; no PONG within as long again means a half-open connection, which is
            dropped and re-established (None disables).
        daemon_db: the db of the daemon's ``--redis-url`` (its snapshots live there),
            whatever db the application's client uses.
        restart_after_fork: restart the thread in a forked child (gunicorn
            ``--preload`` workers, Celery prefork, multiprocessing): threads do not
            survive ``fork()``, so without it a child would never hear of a hot key.

    A start that fails for a reason retrying cannot fix (authentication, ACL, a
    cluster node answering MOVED to a plain client, a snapshot key of the wrong
    type) stops the thread: :meth:`wait_ready` returns False at once and
    :attr:`error` holds the cause. :attr:`last_error` is the latest failure.
    """

    def __init__(
        self,
        client: AnyRedis,
        hotset: HotSet | None = None,
        *,
        namespace: Namespace | None = None,
        clock: Clock | None = None,
        stale_after: float = float(limits.INSTANCE_MAX_AGE_S),
        backoff: tuple[float, float] = (0.05, 5.0),
        expire_interval: float = 0.05,
        resync_interval: float | None = 60.0,
        auth: MessageAuth | None = None,
        health_interval: float | None = 5.0,
        daemon_db: int = 0,
        restart_after_fork: bool = True,
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
        self.restart_after_fork = restart_after_fork
        self._own: Any = None  # the subscription's own client (dedicated_client)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        track_fork(self)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Subscriber:
        """Start the background thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self.error = None
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
        self._close_own()

    def _close_own(self) -> None:
        own, self._own = self._own, None
        if own is not None and own is not self.client:
            with contextlib.suppress(Exception):
                own.close()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until subscribed and bootstrapped (True), timeout or a fatal error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready.is_set():
            if self.error is not None:
                return False
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return False
            self._ready.wait(left)
        return True

    def after_fork_in_child(self) -> None:
        """Called in a forked child: the thread and its sockets stayed in the parent."""
        running = self._thread is not None and not self._stop.is_set()
        self._thread = None
        self._own = None  # the parent's sockets: never read them here
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.connected = False
        if running and self.restart_after_fork:
            self.start()  # bootstraps again; reset listeners drop copies made pre-fork

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
        snaps = fetch_snapshots(
            self._client(),
            self.namespace,
            clock=self.clock,
            max_age=self.stale_after,
            instances=None if instance is None else [instance],
            on_bad=self.on_bad_snapshot,
            auth=self.auth,
        )
        return list(snaps.values())

    # ------------------------------------------------------------------- loop
    def _client(self) -> Any:
        if self._own is None:
            self._own = dedicated_client(self.client, db=self.daemon_db)
        return self._own

    def _run(self) -> None:
        while not self._stop.is_set():
            ps = None
            try:
                ps = self._client().pubsub(ignore_subscribe_messages=False)
                self._subscribe(ps)
                self._await_subscribed(ps)
                self._bootstrap()
                self.backoff.reset()
                self._pump(ps)
            except _CONN_ERRORS as exc:
                self.connected = False
                self.last_error = str(exc)
                self.warn(logging.WARNING, "hotkeyd subscription lost (%s); reconnecting", exc)
            except (*REDIS_ERRORS, HotkeydError) as exc:
                self.connected = False
                err = translate_redis_error(exc)
                self.last_error = str(err)
                if not self._ready.is_set() and not isinstance(err, UnreachableError):
                    # authentication, ACL, MOVED, WRONGTYPE: retrying cannot fix it
                    self.error = err
                    logger.error("hotkeyd subscriber cannot start: %s", err)
                    break
                self.warn(logging.ERROR, "hotkeyd subscriber: %s; retrying", err)
            except Exception:
                self.connected = False
                self.warn(logging.ERROR, "hotkeyd subscriber failed; restarting", exc_info=True)
            finally:
                if ps is not None:
                    with contextlib.suppress(Exception):  # a dead socket must not stop us
                        ps.close()
            if not self._stop.is_set():
                self.on_lost()
                self._stop.wait(self.backoff.next_delay())
        self.connected = False
        self._close_own()

    def _subscribe(self, ps: Any) -> None:
        if self.namespace.sharded:
            ps.ssubscribe(*self.channels)
        else:
            ps.subscribe(*self.channels)

    def _get(self, ps: Any, timeout: float) -> Any:
        if self.namespace.sharded and hasattr(ps, "get_sharded_message"):  # cluster
            # One pub/sub per shard, polled in turn, one message per call: a blocking poll
            # waited ``timeout`` on each quiet shard before the busy one, so invalidations
            # queued faster than they were read (a copy served until its TTL). Take what
            # any shard has first, then wait at most ``timeout`` in all.
            m = ps.get_sharded_message(timeout=0.0)
            if m is None:
                shards = max(1, len(getattr(ps, "node_pubsub_mapping", ())))
                m = ps.get_sharded_message(timeout=timeout / shards)
            return m
        return ps.get_message(timeout=timeout)

    def _await_subscribed(self, ps: Any) -> None:
        pending = set(self.channels)
        deadline = time.monotonic() + 5.0  # an I/O timeout: real time, not the TTL clock
        while pending:
            if self._stop.is_set():
                return
            m = self._get(ps, 0.1)
            if m is not None and m["type"] == self.subscribe_type:
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
        events, watch = self.namespace.channel, self.namespace.watch_channel
        live = Liveness(self.health_interval, can_ping=_can_ping(ps))
        while not self._stop.is_set():
            m = self._get(ps, 0.05)
            if live.after(m is not None):
                ps.ping()
            if m is not None:
                kind = m["type"]
                if kind == self.message_type:
                    ch = _text(m["channel"])
                    if ch == events:
                        self.on_message(m["data"])
                    elif ch == watch:
                        self.on_heartbeat(m["data"])
                    else:
                        self.on_invalidation(m["data"])
                elif kind == self.subscribe_type and _text(m["channel"]) in self.channels:
                    # redis-py resubscribed under us (reconnect, or a shard channel that
                    # moved with its slot): messages may be lost, bootstrap again.
                    self._bootstrap()
            now = self.clock.monotonic()
            if now >= next_expire:
                self.hotset.expire()
                next_expire = now + self.expire_interval
            if self.resync_interval and now >= next_resync:
                self.apply_snapshots(self.resync())
                next_resync = now + self.resync_interval

    def on_message(self, data: Any) -> None:
        """Handle one message of the events channel, as the subscription does with each:
        parse it, apply it, and on a sequence gap read its instance's snapshot from Redis,
        apply that, then the message. Bad input is counted and logged, never raised.
        """
        msg = self.parse(data)
        if msg is not None and self.on_event(msg):
            self.after_resync(msg, self.resync(msg.instance))
