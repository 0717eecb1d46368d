"""One data node's watch: the tracking connection, arming, re-arms, broadcasts and
heartbeats (the design is in :mod:`hotkeyd.watch`)."""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from hotkeyd.client.invalidation import encode_invalidation
from hotkeyd.conn.redis import parse_redis_url
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.watch.bus import _Bus
from hotkeyd.watch.metrics import WatchMetrics
from hotkeyd.watch.slots import Ranges, _fmt, _holds, _intersect, _merge, _minus, _owned

__all__ = [
    "HEARTBEAT_INTERVAL",
    "MAX_REARM_SPACING",
    "REARM_BUDGET",
    "REARM_SPACING",
    "NodeWatch",
    "rearm_spacing",
]

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 0.1
"""Seconds between two heartbeats of one node's watch."""

_ARM_BATCH = 256  # keys armed per round trip
_PING = b"*1\r\n$4\r\nPING\r\n"  # packed once: sent at every heartbeat
REARM_SPACING = 0.05
"""Seconds between two re-arms of one key. A tracking table smaller than the hot set
(``tracking-table-max-keys``) makes each re-arm evict another key, which Redis reports
as an invalidation: without spacing the watch would broadcast thousands per second.
A key invalidated again sooner is broadcast at once *and* once more after its deferred
re-arm, so a write in between is still dropped within this spacing. This is the least
spacing: under a re-arm budget it grows (:func:`rearm_spacing`)."""

REARM_BUDGET = 5000
"""Re-arms per second one node's watch may cost the data Redis (``--watch-rearm-budget``).
Each write to an armed key costs Redis a push, a re-arm and its share of a PUBLISH; when
many hot keys are each written many times a second, that is what the data Redis pays
for the watch. The budget caps it by spacing the re-arms of the keys written most often
(:func:`rearm_spacing`); 0 turns it off (spacing stays :data:`REARM_SPACING`)."""

MAX_REARM_SPACING = 0.25
"""The most a budget may space one key's re-arms, in seconds: below the strict mode's
300 ms watch lease, so a write to a key re-armed late is still dropped within it."""

_BUSY_WINDOW = 1.0  # seconds: a key written within it counts against the budget
_COALESCE = 0.001
"""Seconds a busy watch lets pushes gather: pushes read within this long of the last
handled batch wait for its end and are handled together (one re-arm and one PUBLISH
for all of them). A watch that is not busy handles a push at once."""
_COALESCE_OVER_BUDGET = 0.005
"""The same while the budget spaces re-arms (spacing above :data:`REARM_SPACING`): the
watch's own round trips, like the re-arms Redis serves, stay bounded (at most 200 a
second), and a push waits at most 5 ms, a small part of the spacing it is under."""


def rearm_spacing(busy: int, budget: int) -> float:
    """Seconds between two re-arms of one key when ``busy`` keys were written in the last
    second: each key is re-armed at most once per spacing, so the node's re-arms stay
    under ``busy / spacing = budget`` a second. A key written less often than once per
    spacing is never deferred: only the keys written most often wait, and a write to
    one of them is dropped within the spacing instead of at once. Between
    :data:`REARM_SPACING` and :data:`MAX_REARM_SPACING` (a budget that would need more
    is exceeded, never the lease)."""
    if budget <= 0:
        return REARM_SPACING
    return min(MAX_REARM_SPACING, max(REARM_SPACING, busy / budget))


class NodeWatch:
    """The watch of one data node: one tracking connection and its thread.

    Args:
        url: the node (``redis://`` URL, credentials in it).
        node: the node's id in heartbeats and metrics (``host:port``).
        bus: where invalidations and heartbeats go.
        origin: the ``origin`` of the invalidations (the daemon's instance).
        wm: metrics.
        on_moved: called when the node answers MOVED (a cluster's slots moved).
        on_slots: a cluster node: called, from the watch thread, with the node's
            ``CLUSTER SLOTS`` reply when it differs from the slots assigned to the node.
        rearm_budget: re-arms per second this node may cost the data Redis (0: no
            budget); see :data:`REARM_BUDGET`.
    """

    def __init__(
        self,
        url: str,
        node: str,
        bus: _Bus,
        origin: str,
        wm: WatchMetrics,
        *,
        on_moved: Callable[[], None] | None = None,
        on_slots: Callable[[Any], None] | None = None,
        rearm_budget: int = REARM_BUDGET,
    ) -> None:
        self.url, self.node, self.bus, self.origin, self.wm = url, node, bus, origin, wm
        self.rearm_budget = rearm_budget
        self.spacing = REARM_SPACING  # between two re-arms of one key (rearm_spacing)
        wm.spacing.labels(node=node).set(REARM_SPACING)
        self.on_moved = on_moved
        self.on_slots = on_slots
        self.epoch = 0
        self.connected = False
        self.error: str | None = None
        self._want: frozenset[bytes] = frozenset()  # the hot keys this node owns
        self._want_seq = 0  # the daemon's notification seq that announced _want
        self.armed_seq = 0  # every key of _want_seq is armed under this epoch
        # A cluster primary's ranges its heartbeats claim (None: a plain node, which covers
        # every key). Gains are claimed once their keys are armed; losses at once.
        self.slots: tuple[tuple[int, int], ...] | None = () if on_slots is not None else None
        self._want_slots: tuple[tuple[int, int], ...] | None = self.slots  # assigned
        self._beat_now = False  # the claim shrank: heartbeat at once
        # The data Redis is the bus (the default: no --watch-url): an invalidation is
        # published on the tracking connection itself, pipelined after its keys' re-arm.
        # Redis runs one connection's commands in order, so the re-arm still precedes
        # every re-read the invalidation causes, and the watch waits one round trip
        # instead of two (each a wake-up of this thread, behind the GIL under load).
        self._copublish = on_slots is None and url == bus.url and not bus.namespace.sharded
        self._beat_on_conn = True  # heartbeats too, pipelined after a PING (until refused)
        self._armed: set[bytes] = set()
        self._last_arm: dict[bytes, float] = {}
        self._deferred: dict[bytes, float] = {}  # key -> when to re-arm it
        self._due: list[tuple[float, bytes]] = []  # heap of _deferred's (time, key)
        self._written: dict[bytes, float] = {}  # hot key -> its last write push (budget)
        self._pushes: list[list[bytes] | None] = []
        self._pushed_at = 0  # CLOCK_MONOTONIC ns: when the first of _pushes was read
        self._handled_at = 0.0  # when the last batch of pushes was handled (_COALESCE)
        self._trace = _trace_file()
        self._changed = threading.Event()
        self._stop = threading.Event()
        # The watch thread sleeps in select() until its next job is due (a heartbeat, a
        # deferred re-arm); a push on the tracking connection or a byte here (new hot
        # keys, close) wakes it at once.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._lock = threading.Lock()
        self._warn = RateLimitedLog(logger)
        self._client: Any = None
        self._conn: Any = None
        self._beat_state: tuple[Any, ...] | None = None
        self._beat_parts = ("", "")
        self._thread = threading.Thread(target=self._run, name=f"hotkeyd-watch-{node}", daemon=True)

    # -- called from the daemon's loop (never blocks) ----------------------------------
    def set_keys(
        self,
        keys: frozenset[bytes],
        seq: int = 0,
        slots: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        """The hot keys this node owns, as announced up to notification ``seq``; on a
        cluster, with the slot ranges the node owns (the keys are the hot ones in them)."""
        with self._lock:
            if slots is None:
                slots = self._want_slots
            if keys == self._want and seq == self._want_seq and slots == self._want_slots:
                return
            self._want, self._want_seq, self._want_slots = keys, seq, slots
        self._changed.set()
        self._wake()

    def start(self) -> NodeWatch:
        self._thread.start()
        return self

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake()
        self._thread.join(timeout)
        self.wm.up.labels(node=self.node).set(0)

    def _wake(self) -> None:
        # full: a wake-up is pending anyway; closed: the thread has ended
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # -- the watch thread ---------------------------------------------------------------
    def _run(self) -> None:
        next_beat = 0.0
        backoff = 0.05
        while not self._stop.is_set():
            try:
                if self._conn is None:
                    self._connect()
                    backoff = 0.05
                if self._changed.is_set():
                    self._changed.clear()
                    with self._lock:
                        assigned = self._want_slots
                    if assigned is not None:
                        self._shrink(assigned)
                    armed = self.armed_seq
                    self._sync()
                    if self.armed_seq != armed or self._beat_now:
                        # strict apps wait for armed >= the seq of a key's announcement:
                        # tell them now (the old 10 ms polling let the beat drift against
                        # the tick; a beat locked to a bad phase lagged ~100 ms each time)
                        next_beat = 0.0
                now = time.monotonic()
                due = next_beat
                if self._pushes:  # read along with a reply (PING, arming): handle them now
                    due = now
                elif self._due:
                    due = min(due, self._due[0][0])
                self._drain(max(0.0, min(due - now, HEARTBEAT_INTERVAL)))
                self._handle_pushes()
                self._due_rearms()
                now = time.monotonic()
                if now >= next_beat or self._beat_now:
                    next_beat = now + HEARTBEAT_INTERVAL
                    self._beat_now = False
                    self._pace(now)
                    # A round trip first: a half-open connection blocks here (socket
                    # timeout), so its heartbeats stop and strict apps stop serving
                    # within their lease instead of trusting a dead watch.
                    if self._copublish and self._beat_on_conn:
                        self._beat_round_trip()
                    else:
                        self._round_trip()
                        self._heartbeat()
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                self._lost(str(exc) or type(exc).__name__)
                self._heartbeat()  # up: false, at once
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except (redis.AuthenticationError, redis.ResponseError) as exc:  # ACL, auth
                self._warn(logging.ERROR, "watch %s refused: %s (see its ACL)", self.node, exc)
                self._lost(str(exc))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception as exc:  # a bug must not end the watch silently
                self._warn(logging.ERROR, "watch %s failed", self.node, exc_info=True)
                self._lost(f"{type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        if self._client is not None:
            self._client.close()
        if self._trace is not None:
            self._trace.close()
        self._wake_r.close()
        self._wake_w.close()

    def _round_trip(self) -> None:
        """PING, or on a cluster CLUSTER SLOTS: the node still owns its claimed slots."""
        if self.on_slots is None:
            self._conn.send_packed_command([_PING], check_health=False)
            self._conn.read_response()
            return
        self._conn.send_command("CLUSTER", "SLOTS")
        reply = self._conn.read_response()
        owned = _owned(reply, self.node)
        with self._lock:
            want = self._want_slots
        if owned == want:
            return
        self._shrink(owned)
        self.on_slots(reply)  # re-read the topology from this reply: arm the new owner

    def _shrink(self, owned: Ranges) -> None:
        """Stop vouching for the claimed slots outside ``owned``, under a new epoch: a
        copy an app took while this node vouched for it is never served again, even if
        the slot comes back (writes went elsewhere meanwhile)."""
        with self._lock:
            claimed = self.slots
            if claimed is None:
                return
            kept = _intersect(claimed, owned)
            if kept == claimed:
                return
            self.slots = kept
        self.epoch += 1
        self.wm.epoch.labels(node=self.node).set(self.epoch)
        self._beat_now = True
        logger.warning(
            "watch %s: no longer owns slots %s (a failover or a slot move): epoch %d",
            self.node, _fmt(_minus(claimed, owned)), self.epoch,
        )  # fmt: skip

    def _connect(self) -> None:
        settings = parse_redis_url(self.url)
        kwargs = settings.client_kwargs()
        kwargs.update(
            protocol=3,
            single_connection_client=True,
            retry=Retry(NoBackoff(), 0),
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
        )
        if self._client is not None:
            self._client.close()
        self._client = redis.Redis(**kwargs)
        conn: Any = self._client.connection
        conn.connect()
        conn._parser.set_invalidation_push_handler(self._on_push)
        self._conn = conn
        self._client.client_tracking_on(optin=True)
        self.epoch += 1
        if self.epoch > 1:
            self.wm.reconnects.labels(node=self.node).inc()
        self.wm.epoch.labels(node=self.node).set(self.epoch)
        self.connected, self.error = True, None
        self.wm.up.labels(node=self.node).set(1)
        stale = set(self._armed) | set(self._deferred)
        self.armed_seq = 0
        self._armed.clear()
        self._deferred.clear()
        self._due.clear()
        self._changed.clear()
        self._sync()  # re-arm every hot key first ...
        if self.epoch > 1:  # ... then drop the copies taken while unwatched
            gap = stale | set(self._armed)
            self._broadcast(gap, "reconnect")
            logger.warning(
                "watch %s reconnected (epoch %d): %d hot key(s) invalidated",
                self.node, self.epoch, len(gap),
            )  # fmt: skip

    def _lost(self, why: str) -> None:
        if self.connected:
            logger.warning("watch %s lost: %s; reconnecting", self.node, why)
            if self.on_moved is not None:  # a cluster node: it may have failed over
                self.on_moved()
        self.connected, self.error = False, why
        self.wm.up.labels(node=self.node).set(0)
        self._conn = None

    def _sync(self) -> None:
        with self._lock:
            want, seq, slots = self._want, self._want_seq, self._want_slots
        gone = self._armed - want
        self._armed -= gone  # cooled keys: Redis forgets them at their next write
        for k in [k for k in self._last_arm if k not in want]:
            del self._last_arm[k]
            self._written.pop(k, None)
        # A key whose re-arm is deferred (self.spacing) waits for it: the apps were told,
        # and are told again once it is re-armed.
        self._arm([k for k in want if k not in self._armed and k not in self._deferred])
        if all(k in self._armed or k in self._deferred for k in want):
            # strict-mode apps serve a key announced at seq <= armed_seq (docs/consistency.md)
            self.armed_seq = max(self.armed_seq, seq)
            if self.slots is not None and slots is not None and slots != self.slots:
                # Every hot key of the node's slots is armed: claim the gained ones, and
                # drop the copies of their keys (written on this node before the arming).
                gained = _minus(slots, self.slots)
                with self._lock:
                    if slots == self._want_slots:
                        self.slots = slots
                moved = [k for k in want if _holds(gained, key_slot(k))]
                if moved:
                    self._broadcast(moved, "moved")

    def _arm(self, keys: Iterable[bytes], then: tuple[Any, ...] | None = None) -> Any:
        """CLIENT CACHING yes + one EXISTS of many keys, pipelined on the tracking connection.

        One EXISTS reads (and so arms) every key it names: on a single node a whole chunk
        of keys is armed with two commands instead of two per key; on a cluster node one
        EXISTS per slot (a command's keys share a slot there). A group whose EXISTS is
        refused (e.g. an ACL that allows some of its keys only) is armed key by key.

        ``then``: one more command sent after the last re-arm, in the same round trip;
        its reply (a ``ResponseError`` is returned, not raised) is the return value.
        """
        todo = list(keys)
        chunks = [todo[i : i + _ARM_BATCH] for i in range(0, len(todo), _ARM_BATCH)] or [[]]
        result: Any = None
        for n, chunk in enumerate(chunks):
            extra = then is not None and n == len(chunks) - 1
            if not chunk and not extra:
                continue
            if self.slots is None:
                groups = [chunk] if chunk else []
            else:
                by_slot: dict[int, list[bytes]] = {}
                for k in chunk:
                    by_slot.setdefault(key_slot(k), []).append(k)
                groups = list(by_slot.values())
            sent = self._arm_groups(groups, then if extra else None)
            if extra:
                result = sent
        self.wm.watched.labels(node=self.node).set(len(self._armed))
        return result

    def _arm_groups(self, groups: list[list[bytes]], then: tuple[Any, ...] | None) -> Any:
        """One round trip: CLIENT CACHING yes + EXISTS per group, then ``then``."""
        cmds: list[tuple[Any, ...]] = []
        for g in groups:
            cmds += [("CLIENT", "CACHING", "YES"), ("EXISTS", *g)]
        if then is not None:
            cmds.append(then)
        self._conn.send_packed_command(self._conn.pack_commands(cmds))
        moved: set[int] = set()  # slots of keys this node no longer serves
        refused: list[bytes] = []  # keys of a group whose EXISTS failed otherwise
        result: Any = None
        armed = 0
        for j in range(len(cmds)):
            if then is not None and j == len(cmds) - 1:
                try:
                    result = self._conn.read_response()
                except redis.ResponseError as exc:
                    result = exc
                continue
            g = groups[j // 2]
            try:
                self._conn.read_response()
            except redis.ResponseError as exc:
                # redis-py raises MovedError/AskError with the "MOVED" cut off
                if isinstance(exc, (redis.exceptions.AskError, redis.ReadOnlyError)):
                    moved.add(key_slot(g[0]))
                elif j % 2 == 1 and len(g) > 1:
                    refused += g
                else:
                    self._warn(logging.WARNING, "watch %s: arming failed: %s", self.node, exc)
                continue
            if j % 2 == 1:
                now = time.monotonic()
                for k in g:
                    self._armed.add(k)
                    self._last_arm[k] = now
                armed += len(g)
        self.wm.armed.labels(node=self.node).inc(armed)
        if refused:
            # Their keys are armed only now, after ``then`` (an invalidation's PUBLISH)
            # went out: send it once more after them, as after a deferred re-arm.
            again = self._arm_groups([[k] for k in refused], then)
            if then is not None:
                result = again
        if moved:
            # An ASK (the slot is migrating: the key's writes go to the target now,
            # unwatched) or a MOVED: stop vouching for those slots at once; the
            # topology re-read moves them to their owner.
            if self.slots is not None:
                self._shrink(_minus(self.slots, _merge((s, s) for s in moved)))
            if self.on_moved is not None:
                self.on_moved()
        return result

    def _drain(self, timeout: float) -> None:
        """Read every push; first wait up to ``timeout`` for one or for a wake-up."""
        conn = self._conn
        if conn is None:
            return
        # can_read(0) first: the parser may hold a push read along with a reply.
        if not conn.can_read(timeout=0) and timeout > 0 and not self._changed.is_set():
            ready, _, _ = select.select([conn._sock, self._wake_r], [], [], timeout)
            if self._wake_r in ready:
                with contextlib.suppress(OSError):  # BlockingIOError: drained
                    while self._wake_r.recv(64):
                        pass
            if conn._sock not in ready:
                return  # woken, or time for the next job: nothing to read
        while conn.can_read(timeout=0):
            conn.read_response(push_request=True)

    def _on_push(self, response: Any) -> None:
        """``[b"invalidate", [key, ...]]``, or ``[b"invalidate", None]`` on a flush."""
        if len(response) < 2 or response[0] not in (b"invalidate", "invalidate"):
            return
        keys = response[1]
        if not self._pushes:
            self._pushed_at = time.monotonic_ns()
        self._pushes.append(
            None if keys is None else [k if isinstance(k, bytes) else str(k).encode() for k in keys]
        )

    def _handle_pushes(self) -> None:
        if not self._pushes:
            return
        gather = _COALESCE if self.spacing <= REARM_SPACING else _COALESCE_OVER_BUDGET
        wait = self._handled_at + gather - time.monotonic()
        if wait > 0:  # busy: pushes came within the gathering window of the last batch
            time.sleep(wait)
            self._drain(0.0)
        self._handled_at = time.monotonic()
        pushes, self._pushes = self._pushes, []
        flush = any(p is None for p in pushes)
        if flush:  # every hot key, also one whose arming is still under way
            with self._lock:
                keys = set(self._armed) | set(self._want)
            cause = "flush"
        else:
            keys = {k for p in pushes if p is not None for k in p}
            cause = "write"
        # Both a write and a tracking-table eviction end the key's tracking: re-arm the
        # keys still hot BEFORE telling the apps, so their re-reads are watched.
        self._armed -= keys
        with self._lock:
            want = self._want
        now = time.monotonic()
        now_keys, later = [], []
        spacing = self.spacing
        for k in keys:
            if k not in want:
                continue
            if not flush:
                self._written[k] = now
            if now - self._last_arm.get(k, 0.0) < spacing:
                later.append(k)
            else:
                now_keys.append(k)
        self._rearm_then_publish(now_keys, keys, cause, self._pushed_at)
        if later:
            self._warn(
                logging.WARNING,
                "watch %s: keys invalidated faster than every %g s, re-arms spaced (keys "
                "written that often, e.g. a write-hot counter, %d keys written in the last "
                "second against a budget of %d re-arms/s, or a tracking table smaller than "
                "the hot set: see tracking-table-max-keys)",
                self.node, spacing, len(self._written), self.rearm_budget,
            )  # fmt: skip
            for k in later:
                if k not in self._deferred:
                    t = self._deferred[k] = self._last_arm[k] + spacing
                    heapq.heappush(self._due, (t, k))

    def _rearm_then_publish(
        self, arm: list[bytes], keys: Iterable[bytes], cause: str, pushed_at: int = 0
    ) -> None:
        """Re-arm ``arm``, then invalidate ``keys`` on the bus: on the bus node, the
        PUBLISH pipelined after the re-arm on the tracking connection (one round trip)."""
        ks = sorted(keys)
        if self._copublish and len(ks) <= _ARM_BATCH:
            body = encode_invalidation(self.origin, ks)
            if self.bus.auth is not None:
                body = self.bus.auth.sign(body)
            sent = self._arm(arm, then=(self.bus.cmd, self.bus.namespace.invalidate_channel, body))
            if not isinstance(sent, redis.ResponseError):
                self._sent(ks, cause, pushed_at)
                return
            self._warn(  # e.g. NOPERM: the bus's own path
                logging.WARNING, "watch %s: publishing with the re-arm failed: %s", self.node, sent
            )
        else:
            self._arm(arm)
        self._broadcast(ks, cause, pushed_at)

    def _pace(self, now: float) -> None:
        """Set the re-arm spacing from the keys written in the last second (at each beat:
        ten times a second, whatever the write rate)."""
        if self._written:
            old = now - _BUSY_WINDOW
            self._written = {k: t for k, t in self._written.items() if t >= old}
        spacing = rearm_spacing(len(self._written), self.rearm_budget)
        if spacing != self.spacing:
            self.spacing = spacing
            self.wm.spacing.labels(node=self.node).set(spacing)

    def _due_rearms(self) -> None:
        """Re-arm the deferred keys whose time came, then invalidate them again."""
        if not self._due:
            return
        now = time.monotonic()
        due = []
        while self._due and self._due[0][0] <= now:  # a heap: no scan of every deferred key
            t, k = heapq.heappop(self._due)
            if self._deferred.get(k) == t:
                del self._deferred[k]
                due.append(k)
        if not due:
            return
        with self._lock:
            want = self._want
        due = [k for k in due if k in want and k not in self._armed]
        if due:
            self._rearm_then_publish(due, due, "deferred")

    def _broadcast(self, keys: Iterable[bytes], cause: str, pushed_at: int = 0) -> None:
        ks = sorted(keys)
        for i in range(0, len(ks), _ARM_BATCH):
            chunk = ks[i : i + _ARM_BATCH]
            if self.bus.send(
                self.bus.namespace.invalidate_channel, encode_invalidation(self.origin, chunk)
            ):
                self._sent(chunk, cause, pushed_at)

    def _sent(self, chunk: list[bytes], cause: str, pushed_at: int) -> None:
        """Count (and trace) an invalidation of ``chunk`` that was published."""
        self.wm.invalidations.labels(node=self.node, cause=cause).inc(len(chunk))
        if self._trace is not None:
            done = time.monotonic_ns()
            self._trace.write("".join(
                f"{self.node} {cause} {pushed_at or done} {done} {k.hex()}\n" for k in chunk
            ))  # fmt: skip

    def _beat_round_trip(self) -> None:
        """On the bus node: PING and the heartbeat's PUBLISH in one write on the tracking
        connection, and both replies read (issue 27: one send and one wake-up per beat
        instead of two of each). A beat then leaves only on a connection that carries
        it, so a half-open one stops the beats as the PING alone did. A refused PUBLISH
        (an ACL without it) moves the beats to the bus's own connection for good."""
        body = self._beat_body()
        if self.bus.auth is not None:
            body = self.bus.auth.sign(body)
        packed = self._conn.pack_command(self.bus.cmd, self.bus.namespace.watch_channel, body)
        self._conn.send_packed_command([b"".join([_PING, *packed])], check_health=False)
        self._conn.read_response()
        try:
            self._conn.read_response()
        except redis.ResponseError as exc:
            self._warn(
                logging.WARNING,
                "watch %s: heartbeats on the tracking connection refused (%s): sent on "
                "the bus connection instead",
                self.node,
                exc,
            )
            self._beat_on_conn = False
            self._heartbeat()

    def _heartbeat(self) -> None:
        self.bus.send(self.bus.namespace.watch_channel, self._beat_body(), wait=False)

    def _beat_body(self) -> bytes:
        # The body is built once per state (epoch, up, keys, armed, slots) and only the
        # time is formatted per beat: ten beats a second per node (issue 27).
        state = (self.epoch, self.connected, len(self._armed), self.armed_seq, self.slots)
        if state != self._beat_state:
            body: dict[str, Any] = {
                "v": 1,
                "instance": self.origin,
                "node": self.node,
                "epoch": self.epoch,
                "up": self.connected,
                "keys": len(self._armed),
                "armed": self.armed_seq if self.connected else 0,
                "ts": 0.0,
            }
            if self.slots is not None:
                body["slots"] = [[lo, hi] for lo, hi in self.slots]
            head, _, tail = json.dumps(body, separators=(",", ":")).partition('"ts":0.0')
            self._beat_parts = (head + '"ts":', tail)
            self._beat_state = state
        head, tail = self._beat_parts
        return (head + repr(round(time.time(), 3)) + tail).encode("utf-8")


def _trace_file() -> Any:
    """``HOTKEYD_WATCH_TRACE``'s file, line-buffered (None: no trace)."""
    path = os.environ.get("HOTKEYD_WATCH_TRACE", "")
    return open(path, "a", buffering=1) if path else None
