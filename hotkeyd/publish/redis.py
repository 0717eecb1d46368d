"""Publishing to Redis: pub/sub channel + per-instance snapshot, off the caller's thread.

``publish()`` only updates the in-memory hot set and appends the message to a bounded
queue; a background thread does all network I/O. Each send is one ``MULTI/EXEC``::

    SET   {<prefix>}:snapshot:<instance> <snapshot JSON> PX <expiry>
    ZADD  {<prefix>}:instances <now> <instance>
    PUBLISH <channel> <message JSON>      (one per queued message; SPUBLISH when sharded)

Because the three are atomic, a client that SUBSCRIBEs first and then GETs the snapshot
sees a snapshot whose ``seq`` covers every message it may have missed; it drops
buffered messages with ``seq <=`` the snapshot's and applies the rest.

On a Redis Cluster (detected from the URL's node, see :mod:`hotkeyd.conn.cluster`) the
SET and ZADD share the ``{prefix}`` slot and stay one MULTI/EXEC, and the messages
follow in one pipelined round trip right after it: a cluster transaction cannot hold a
PUBLISH. The order keeps the guarantee above (the snapshot is never behind a message a
client could have seen), and a publish that fails after the snapshot was written is
healed like any failure: by a full republish, or by the client's gap resync.

Failure handling, in one place:

* queue overflow -> the queued deltas are dropped and one ``full=true`` message is
  sent instead (the hot set is state, nothing is lost); counted in
  ``hotkeyd_publish_coalesced_total``;
* Redis error -> counted in ``hotkeyd_publish_failures_total``, logged at a limited
  rate, retried after a capped, jittered exponential backoff; the first success after
  a failure is a ``full=true`` republish (``hotkeyd_publish_full_republish_total``);
* a heartbeat (``PEXPIRE``, or ``SET ... XX`` when the state changed, + ``ZADD``, +
  ``ZREMRANGEBYSCORE`` of instances silent for ``INSTANCE_MAX_AGE``) keeps
  the snapshot alive and its rates and top list fresh; if the snapshot key is gone (Redis restarted without persistence, or was flushed), the full state is
  republished even though the connection itself looked fine.

The worker paces itself on the real monotonic clock (it waits on real sockets); the
injected clock stamps messages and scores the instance index.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.cluster import AnyRedis, is_cluster, publish_many
from hotkeyd.conn.redis import (
    REDIS_ERRORS,
    RedisSettings,
    open_client,
    parse_redis_url,
    translate_redis_error,
)
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import INSTANCE_MAX_AGE, CoolEntry, HotEntry, Message, Namespace
from hotkeyd.publish.base import (
    DEFAULT_TOP_LIMIT,
    HotSetState,
    default_instance_id,
)
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["RedisPublisher"]

logger = logging.getLogger(__name__)

_LABEL = "redis"
_BATCH = 256  # messages per MULTI/EXEC when the queue backs up
_IDLE_WAKE = 1.0  # longest the worker sleeps without re-checking its schedule


class RedisPublisher:
    """Publishes to a Redis channel and keeps this instance's snapshot fresh.

    Args:
        url_or_client_factory: a Redis URL (validated now: a bad one raises
            :class:`~hotkeyd.errors.ConfigError` here, not later), or a callable
            returning a ``redis.Redis``.
        namespace: channel and key names.
        instance: this daemon's id; :func:`default_instance_id` when None.
        clock: stamps messages and heartbeat scores.
        metrics: where failures, republishes and notifications are counted.
        heartbeat: seconds between snapshot refreshes.
        expiry: snapshot TTL in seconds (3 heartbeats by default), so a dead
            instance's snapshot disappears on its own.
        max_pending: queued messages beyond which the queue is coalesced into one
            full republish.
        backoff_base, backoff_cap: retry delays after a failure (seconds).
        log_interval: at most one failure log line per this many seconds.
        rng: jitter source (seed it in tests).
        auth: sign every message and snapshot (:mod:`hotkeyd.protocol.auth`); unsigned when None.
    """

    def __init__(
        self,
        url_or_client_factory: str | Callable[[], AnyRedis],
        namespace: Namespace | None = None,
        instance: str | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        *,
        heartbeat: float = 1.0,
        expiry: float | None = None,
        max_pending: int = 1000,
        backoff_base: float = 0.1,
        backoff_cap: float = 10.0,
        top_limit: int = DEFAULT_TOP_LIMIT,
        log_interval: float = 10.0,
        rng: random.Random | None = None,
        auth: MessageAuth | None = None,
    ) -> None:
        if heartbeat <= 0:
            raise ValueError(f"heartbeat must be > 0 seconds, got {heartbeat}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self._target: str | RedisSettings | None
        if isinstance(url_or_client_factory, str):
            settings = parse_redis_url(url_or_client_factory)
            self._factory: Callable[[], AnyRedis] = lambda: open_client(settings)
            self._target = settings
        else:
            self._factory = url_or_client_factory
            self._target = None
        self.namespace = namespace or Namespace()
        clock = clock or SystemClock()
        self._clock = clock
        self._metrics = metrics or Metrics()
        self.heartbeat = heartbeat
        self.expiry = expiry if expiry is not None else 3 * heartbeat
        if self.expiry <= heartbeat:
            raise ValueError(
                f"expiry ({self.expiry}s) must be longer than the heartbeat ({heartbeat}s)"
            )
        self._max_pending = max_pending
        self._state = HotSetState(instance or default_instance_id(), clock, top_limit)
        self._cond = threading.Condition(self._state.lock)
        self._queue: deque[Message] = deque()
        self._need_full = True  # the first send after (re)connecting is a full republish
        self._pending_final = False
        self._backoff = Backoff(backoff_base, backoff_cap, rng)
        self._limiter = RateLimitedLog(logger, log_interval, clock.monotonic)
        self._client: AnyRedis | None = None
        self._connected = False
        self._last_error: str | None = "not started"
        self.unsent = 0  # messages close() could not deliver (queued, or in a stuck send)
        self._inflight = 0  # messages the worker took from the queue and is sending
        self._failures_in_row = 0
        self._written_version = -1
        self._stopping = False
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        self._snapshot_key = self.namespace.snapshot(self.instance)
        self._sign: Callable[[bytes], bytes] = auth.sign if auth is not None else bytes

    # --- Publisher protocol
    @property
    def instance(self) -> str:
        return self._state.instance

    @property
    def healthy(self) -> bool:
        return self._connected and self._last_error is None

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def pending(self) -> int:
        """Messages queued and not yet sent."""
        with self._cond:
            return len(self._queue)

    @property
    def seq(self) -> int:
        """Sequence number of the last message built."""
        return self._state.seq

    def start(self) -> None:
        """Start the background sender; the first thing it sends is a full republish."""
        if self._thread is not None:
            return
        self._last_error = "connecting"
        self._thread = threading.Thread(
            target=self._run, name=f"hotkeyd-publish-{self.instance}", daemon=True
        )
        self._thread.start()

    def publish(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry] = (),
        cool: Sequence[CoolEntry] = (),
        *,
        full: bool = False,
        final: bool = False,
    ) -> None:
        with self._cond:
            self._state.apply(hot, still_hot, cool, full=full)
            if not (hot or still_hot or cool or full or final):
                return
            if self._stopping and not final:
                return
            if self._need_full or full:
                # A full republish is pending (or asked for): it will carry this change.
                self._need_full = True
                self._pending_final |= final
                self._queue.clear()
            elif len(self._queue) >= self._max_pending:
                self._metrics.publish_coalesced.labels(_LABEL).inc(len(self._queue) + 1)
                self._queue.clear()
                self._need_full = True
                self._pending_final |= final
            else:
                self._queue.append(self._state.delta_message(hot, still_hot, cool, final=final))
            self._cond.notify()

    def update_state(
        self, hot_set: Sequence[HotEntry], top: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        self._state.replace(hot_set, top)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (within ``timeout`` s), drop the snapshot, disconnect.

        The snapshot and index entry are removed on a clean close: the instance no
        longer maintains them. Clients keep the entries until their ``ttl_ms``.
        """
        thread = self._thread
        with self._cond:
            self._stopping = True
            self._deadline = time.monotonic() + max(0.0, timeout)
            self._cond.notify_all()
        if thread is not None:
            thread.join(max(0.0, timeout) + 0.5)
            if thread.is_alive():  # stuck in a send: what it holds is not known to arrive
                with self._cond:
                    held = len(self._queue) + self._need_full + self._inflight
                self.unsent = max(self.unsent, held, 1)
                logger.warning(
                    "hotkeyd: publisher did not finish within %.1fs; %d message(s) unsent",
                    timeout,
                    self.unsent,
                )
        else:
            self._close_client()
        self._connected = False

    # --- background worker
    def _run(self) -> None:
        next_heartbeat = 0.0
        retry_at = 0.0
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    work = bool(self._queue) or self._need_full
                    if self._stopping:
                        if not work or now >= self._deadline or retry_at > self._deadline:
                            break
                        if now >= retry_at:
                            break
                    elif now >= retry_at and (work or now >= next_heartbeat):
                        break
                    due = retry_at if (work or now >= next_heartbeat) else next_heartbeat
                    self._cond.wait(max(0.001, min(due - now, _IDLE_WAKE)))
                if self._stopping and (
                    not work or now >= self._deadline or retry_at > self._deadline
                ):
                    break
                batch: list[Message]
                full = self._need_full
                if full:
                    final = self._pending_final or self._stopping
                    batch = [self._state.full_message(final=final)]
                    self._queue.clear()
                    self._need_full = self._pending_final = False
                else:
                    batch = [self._queue.popleft() for _ in range(min(len(self._queue), _BATCH))]
                version = self._state.version
                snapshot = self._state.snapshot() if batch else None
                self._inflight = len(batch)
            try:
                if batch and snapshot is not None:
                    self._send(batch, snapshot, version)
                    if full:
                        self._metrics.republishes.inc()
                if time.monotonic() >= next_heartbeat and not self._stopping:
                    self._heartbeat()
                    next_heartbeat = time.monotonic() + self.heartbeat
            except REDIS_ERRORS as exc:
                retry_at = time.monotonic() + self._backoff.next_delay()
                self._on_failure(exc, batch)
                continue
            except Exception as exc:  # a bug must not silently end publishing for good
                logger.exception("hotkeyd: unexpected error in the publisher thread")
                retry_at = time.monotonic() + self._backoff.next_delay()
                self._on_failure(exc, batch)
                continue
            self._on_success()
            retry_at = 0.0
        self._shutdown()

    def _client_or_connect(self) -> AnyRedis:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def _send(self, batch: list[Message], snapshot: Message, version: int) -> None:
        client = self._client_or_connect()
        ns = self.namespace
        pipe = client.pipeline(transaction=True)
        pipe.set(self._snapshot_key, self._sign(snapshot.dumps()), px=int(self.expiry * 1000))
        pipe.zadd(ns.instances, {self.instance: self._clock.time()})
        payloads = [self._sign(msg.dumps()) for msg in batch]
        if is_cluster(client):  # a cluster transaction cannot PUBLISH: right after it
            pipe.execute()
            publish_many(client, ns.channel, payloads, sharded=ns.sharded)
        else:
            command = "SPUBLISH" if ns.sharded else "PUBLISH"
            for payload in payloads:
                pipe.execute_command(command, ns.channel, payload)
            pipe.execute()
        self._written_version = version
        self._metrics.notifications.labels(_LABEL).inc(len(batch))

    def _heartbeat(self) -> None:
        """Keep the snapshot alive; rewrite it when the state changed since last write.

        ``SET ... XX`` / ``PEXPIRE`` both report a missing key: the snapshot vanished
        under a healthy connection (Redis restarted without persistence, or was
        flushed), so subscribers lost state too and everything is republished.
        """
        with self._cond:
            version = self._state.version
            snap = self._state.snapshot() if version != self._written_version else None
        client = self._client_or_connect()
        px = int(self.expiry * 1000)
        pipe = client.pipeline(transaction=True)
        if snap is not None:
            pipe.set(self._snapshot_key, self._sign(snap.dumps()), px=px, xx=True)
        else:
            pipe.pexpire(self._snapshot_key, px)
        now = self._clock.time()
        pipe.zadd(self.namespace.instances, {self.instance: now})
        # Pruning the index is the daemons' job, so readers (hotkeyd top, apps) stay
        # read-only: drop instances not heard from in INSTANCE_MAX_AGE (crashed ones).
        pipe.zremrangebyscore(self.namespace.instances, "-inf", f"({now - INSTANCE_MAX_AGE}")
        alive, _, _ = pipe.execute()
        if not alive:
            logger.warning(
                "hotkeyd: snapshot %s missing in Redis; republishing the full hot set",
                self._snapshot_key,
            )
            with self._cond:
                self._need_full = True
                self._queue.clear()
        elif snap is not None:
            self._written_version = version

    def _on_success(self) -> None:
        if self._failures_in_row:
            logger.info(
                "hotkeyd: publishing to Redis recovered after %d failed attempts",
                self._failures_in_row,
            )
        self._failures_in_row = 0
        self._backoff.reset()
        self._connected = True
        self._last_error = None
        with self._cond:
            self._inflight = 0

    def _on_failure(self, exc: BaseException, batch: list[Message]) -> None:
        err = translate_redis_error(exc, self._target)
        self._metrics.publish_failures.labels(_LABEL).inc()
        self._failures_in_row += 1
        self._connected = False
        self._last_error = str(err)
        self._limiter.warning(
            "publish", "hotkeyd: publish failed (attempt %d): %s", self._failures_in_row, err
        )
        with self._cond:
            # Whatever was in flight may or may not have arrived: resend the whole state.
            self._need_full = True
            self._pending_final |= any(m.final for m in batch)
            self._queue.clear()
            self._inflight = 0
        self._close_client()

    def _shutdown(self) -> None:
        if self._connected and self._client is not None:
            try:
                pipe = self._client.pipeline(transaction=True)
                pipe.delete(self._snapshot_key)
                pipe.zrem(self.namespace.instances, self.instance)
                pipe.execute()
            except REDIS_ERRORS as exc:
                logger.info(
                    "hotkeyd: could not remove snapshot on close: %s",
                    translate_redis_error(exc, self._target),
                )
        with self._cond:
            dropped = len(self._queue) + (1 if self._need_full else 0)
            self._queue.clear()
        self.unsent = max(self.unsent, dropped)
        if dropped:
            logger.warning(
                "hotkeyd: publisher closed with %d message(s) unsent (last error: %s)",
                dropped,
                self._last_error or "not connected",
            )
        self._close_client()

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                client.close()
