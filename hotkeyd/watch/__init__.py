"""Daemon-assisted invalidation: watch the hot keys on the data Redis, broadcast writes.

The daemon knows which keys are hot. For each data node (``--watch-url``; every primary
of a cluster) one :class:`NodeWatch` holds a RESP3 connection with
``CLIENT TRACKING on OPTIN`` and *arms* each hot key with ``CLIENT CACHING yes`` +
``EXISTS key`` (read-only, any type, no value transferred). Redis then pushes an
``invalidate`` for any write to an armed key (a plain SET, a Lua script, EXPIRE running
out, eviction, a FLUSHALL) whoever made it. The watch re-arms the key *first* and then
publishes an invalidation on ``Namespace.invalidate_channel`` in the SDKs' own format
(:func:`hotkeyd.client.invalidation.encode_invalidation`, signed with ``--auth-key-file``),
so every app in every language drops its copy. Tracking is one-shot per key, so
re-arming before the broadcast means no write after an app's re-read can go unseen.

A reconnect of the watch connection (``CLIENT KILL``, a failover, a network cut) starts a
new *watch epoch*: every hot key is re-armed and then invalidated, because copies taken
during the gap may be stale. A flush push invalidates every hot key of the node.

Every 100 ms each node's watch publishes a heartbeat (``spec/schema/watch-heartbeat-v1.json``)
on ``Namespace.watch_channel``. Arming runs on the watch threads, never on the tick.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from prometheus_client import Counter, Gauge
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from hotkeyd.client.invalidation import encode_invalidation
from hotkeyd.conn.cluster import publish_command
from hotkeyd.conn.redis import client_from_url, open_client, parse_redis_url
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["HEARTBEAT_INTERVAL", "NodeWatch", "Watch", "WatchMetrics"]

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 0.1
"""Seconds between two heartbeats of one node's watch."""

TOPOLOGY_REFRESH = 5.0
"""Seconds between two reads of a cluster's topology (also read on MOVED or a lost node)."""
_ARM_BATCH = 256  # keys armed per round trip
_PING = b"*1\r\n$4\r\nPING\r\n"  # packed once: sent at every heartbeat
REARM_SPACING = 0.05
"""Seconds between two re-arms of one key. A tracking table smaller than the hot set
(``tracking-table-max-keys``) makes each re-arm evict another key, which Redis reports
as an invalidation: without spacing the watch would broadcast thousands per second.
A key invalidated again sooner is broadcast at once *and* once more after its deferred
re-arm, so a write in between is still dropped within this spacing."""


class WatchMetrics:
    """The watch's counters, on the daemon's registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.armed = Counter(
            "hotkeyd_watch_armed_total", "Keys armed for tracking (CLIENT CACHING yes + EXISTS).",
            ["node"], registry=r,
        )  # fmt: skip
        self.invalidations = Counter(
            "hotkeyd_watch_invalidations_total",
            "Keys invalidated on the bus because the data Redis reported a write, per cause "
            "(write, flush, reconnect, deferred: again after a spaced re-arm).",
            ["node", "cause"], registry=r,
        )  # fmt: skip
        self.reconnects = Counter(
            "hotkeyd_watch_reconnects_total", "Watch connections (re)established after the first.",
            ["node"], registry=r,
        )  # fmt: skip
        self.up = Gauge(
            "hotkeyd_watch_up", "1 while the node's watch connection has tracking on.",
            ["node"], registry=r,
        )  # fmt: skip
        self.epoch = Gauge(
            "hotkeyd_watch_epoch", "The node's watch epoch (bumped by every reconnect).",
            ["node"], registry=r,
        )  # fmt: skip
        self.watched = Gauge(
            "hotkeyd_watch_keys", "Hot keys currently armed on the node.", ["node"], registry=r
        )


class _Bus:
    """Publishes invalidations and heartbeats on the bus Redis (thread-safe: a pool)."""

    def __init__(self, url: str, namespace: Namespace, auth: MessageAuth | None) -> None:
        self.url = url
        self.client: Any = None if namespace.sharded else client_from_url(url, socket_timeout=2.0)
        self.namespace = namespace
        self.auth = auth
        self.cmd = publish_command(namespace.sharded)
        self.warn = RateLimitedLog(logger)
        self._lock = threading.Lock()
        self._local = threading.local()  # each watch thread's own bus connection
        self._conns: list[Any] = []

    def _client(self) -> Any:
        # SPUBLISH must reach the shard that owns the channel's slot: on a cluster bus that
        # takes a cluster client (a plain one to the URL's node got MOVED whenever the
        # channel hashed elsewhere: invalidations lost in 2 namespaces of 3). Opened on
        # first use, since asking whether the node is in a cluster is I/O.
        with self._lock:
            if self.client is None:
                self.client = open_client(self.url, socket_timeout=2.0)
            return self.client

    def send(self, channel: str, body: bytes, *, wait: bool = True) -> bool:
        """PUBLISH ``body`` (signed); False (logged) when it failed.

        ``wait=False`` (heartbeats) leaves the reply unread until this thread's next
        send: the beat leaves at once all the same, and the watch thread sleeps once
        less per beat (a publish that failed is logged one beat later).
        """
        if self.auth is not None:
            body = self.auth.sign(body)
        try:
            if self.client is None or self.namespace.sharded:
                self._client().execute_command(self.cmd, channel, body)
            else:
                self._send_direct(channel, body, wait)
            return True
        except (redis.RedisError, OSError) as exc:
            self.warn(logging.WARNING, "watch: publishing on %s failed: %s", channel, exc)
            return False

    def _send_direct(self, channel: str, body: bytes, wait: bool) -> None:
        """One PUBLISH on this thread's own connection to the bus (issue 27).

        Every node's watch sends ten heartbeats a second: through the client's pool
        each cost a checkout (lock, a liveness probe of the connection), the command
        machinery and a release, most of an idle daemon's CPU. A connection per watch
        thread needs none of it. A connection the server closed (``timeout``, a
        restart) is retried once on a fresh one, as the client's own retry would.
        """
        local = self._local
        conn: Any = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = self.client.connection_pool.make_connection()
            local.unread = False
            with self._lock:
                self._conns.append(conn)
        if local.unread:  # the last heartbeat's reply: long arrived, read without waiting
            local.unread = False
            try:
                conn.read_response()
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                conn.disconnect()
            except redis.RedisError as exc:
                self.warn(logging.WARNING, "watch: publishing a heartbeat failed: %s", exc)
        packed = conn.pack_command(self.cmd, channel, body)
        for retry in (False, True):
            try:
                conn.send_packed_command(packed, check_health=False)  # (re)connects
                if wait:
                    conn.read_response()
                else:
                    local.unread = True
                return
            except redis.ConnectionError:
                conn.disconnect()
                if retry:
                    raise

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.disconnect()
        if self.client is not None:
            self.client.close()


class NodeWatch:
    """The watch of one data node: one tracking connection and its thread.

    Args:
        url: the node (``redis://`` URL, credentials in it).
        node: the node's id in heartbeats and metrics (``host:port``).
        bus: where invalidations and heartbeats go.
        origin: the ``origin`` of the invalidations (the daemon's instance).
        wm: metrics.
        on_moved: called when the node answers MOVED (a cluster's slots moved).
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
    ) -> None:
        self.url, self.node, self.bus, self.origin, self.wm = url, node, bus, origin, wm
        self.on_moved = on_moved
        self.epoch = 0
        self.connected = False
        self.error: str | None = None
        self._want: frozenset[bytes] = frozenset()  # the hot keys this node owns
        self._want_seq = 0  # the daemon's notification seq that announced _want
        self.armed_seq = 0  # every key of _want_seq is armed under this epoch
        self.slots: tuple[tuple[int, int], ...] | None = None  # a cluster primary's ranges
        self._armed: set[bytes] = set()
        self._last_arm: dict[bytes, float] = {}
        self._deferred: dict[bytes, float] = {}  # key -> when to re-arm it
        self._pushes: list[list[bytes] | None] = []
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
    def set_keys(self, keys: frozenset[bytes], seq: int = 0) -> None:
        """The hot keys this node owns, as announced up to notification ``seq``."""
        with self._lock:
            if keys == self._want and seq == self._want_seq:
                return
            self._want, self._want_seq = keys, seq
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
                    armed = self.armed_seq
                    self._sync()
                    if self.armed_seq != armed:
                        # strict apps wait for armed >= the seq of a key's announcement:
                        # tell them now (the old 10 ms polling let the beat drift against
                        # the tick; a beat locked to a bad phase lagged ~100 ms each time)
                        next_beat = 0.0
                now = time.monotonic()
                due = next_beat
                if self._pushes:  # read along with a reply (PING, arming): handle them now
                    due = now
                elif self._deferred:
                    due = min(due, min(self._deferred.values()))
                self._drain(max(0.0, min(due - now, HEARTBEAT_INTERVAL)))
                self._handle_pushes()
                self._due_rearms()
                now = time.monotonic()
                if now >= next_beat:
                    next_beat = now + HEARTBEAT_INTERVAL
                    # A round trip first: a half-open connection blocks here (socket
                    # timeout), so its heartbeats stop and strict apps stop serving
                    # within their lease instead of trusting a dead watch.
                    self._conn.send_packed_command([_PING], check_health=False)
                    self._conn.read_response()
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
        self._wake_r.close()
        self._wake_w.close()

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
            want, seq = self._want, self._want_seq
        gone = self._armed - want
        self._armed -= gone  # cooled keys: Redis forgets them at their next write
        for k in [k for k in self._last_arm if k not in want]:
            del self._last_arm[k]
        # A key whose re-arm is deferred (REARM_SPACING) waits for it: the apps were told,
        # and are told again once it is re-armed.
        self._arm([k for k in want if k not in self._armed and k not in self._deferred])
        if all(k in self._armed or k in self._deferred for k in want):
            # strict-mode apps serve a key announced at seq <= armed_seq (docs/consistency.md)
            self.armed_seq = max(self.armed_seq, seq)

    def _arm(self, keys: Iterable[bytes]) -> None:
        """CLIENT CACHING yes + EXISTS for each key, pipelined on the tracking connection."""
        todo = list(keys)
        for i in range(0, len(todo), _ARM_BATCH):
            chunk = todo[i : i + _ARM_BATCH]
            cmds: list[tuple[Any, ...]] = []
            for k in chunk:
                cmds += [("CLIENT", "CACHING", "YES"), ("EXISTS", k)]
            self._conn.send_packed_command(self._conn.pack_commands(cmds))
            moved = False
            for j in range(len(cmds)):
                try:
                    self._conn.read_response()
                except redis.ResponseError as exc:
                    if str(exc).startswith(("MOVED", "ASK")):
                        moved = True
                    else:
                        self._warn(logging.WARNING, "watch %s: arming failed: %s", self.node, exc)
                    continue
                if j % 2 == 1:
                    self._armed.add(chunk[j // 2])
                    self._last_arm[chunk[j // 2]] = time.monotonic()
            self.wm.armed.labels(node=self.node).inc(len(chunk))
            if moved and self.on_moved is not None:
                self.on_moved()
        self.wm.watched.labels(node=self.node).set(len(self._armed))

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
        self._pushes.append(
            None if keys is None else [k if isinstance(k, bytes) else str(k).encode() for k in keys]
        )

    def _handle_pushes(self) -> None:
        if not self._pushes:
            return
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
        for k in keys:
            if k not in want:
                continue
            if now - self._last_arm.get(k, 0.0) < REARM_SPACING:
                later.append(k)
            else:
                now_keys.append(k)
        self._arm(now_keys)
        if later:
            self._warn(
                logging.WARNING,
                "watch %s: keys invalidated faster than every %g s; re-arms spaced (a "
                "tracking table smaller than the hot set? raise tracking-table-max-keys)",
                self.node, REARM_SPACING,
            )  # fmt: skip
            for k in later:
                self._deferred.setdefault(k, self._last_arm[k] + REARM_SPACING)
        self._broadcast(keys, cause)

    def _due_rearms(self) -> None:
        """Re-arm the deferred keys whose time came, then invalidate them again."""
        if not self._deferred:
            return
        now = time.monotonic()
        due = [k for k, t in self._deferred.items() if t <= now]
        if not due:
            return
        for k in due:
            del self._deferred[k]
        with self._lock:
            want = self._want
        due = [k for k in due if k in want and k not in self._armed]
        self._arm(due)
        self._broadcast(due, "deferred")

    def _broadcast(self, keys: Iterable[bytes], cause: str) -> None:
        ks = sorted(keys)
        for i in range(0, len(ks), _ARM_BATCH):
            chunk = ks[i : i + _ARM_BATCH]
            if self.bus.send(
                self.bus.namespace.invalidate_channel, encode_invalidation(self.origin, chunk)
            ):
                self.wm.invalidations.labels(node=self.node, cause=cause).inc(len(chunk))

    def _heartbeat(self) -> None:
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
        self.bus.send(
            self.bus.namespace.watch_channel,
            (head + repr(round(time.time(), 3)) + tail).encode("utf-8"),
            wait=False,
        )


class Watch:
    """Every node's watch for the daemon: the hot set in, invalidations out.

    Args:
        urls: the data Redis servers (``--watch-url``); a node of a cluster expands to
            one watch per primary, and each key is armed on the primary owning its slot.
        bus_url: the bus Redis (``--redis-url``) where invalidations and heartbeats go.
        namespace, origin, auth, metrics: as the daemon's publisher.
    """

    def __init__(
        self,
        urls: Iterable[str],
        bus_url: str,
        *,
        namespace: Namespace,
        origin: str,
        auth: MessageAuth | None,
        metrics: Metrics,
    ) -> None:
        self.urls = list(urls)
        self.bus = _Bus(bus_url, namespace, auth)
        self.origin = origin
        self.wm = WatchMetrics(metrics)
        self.nodes: list[NodeWatch] = []
        self._slots: dict[str, list[tuple[int, int, NodeWatch]]] = {}
        self._plain: dict[str, NodeWatch] = {}
        self._keys: frozenset[bytes] = frozenset()
        self._seq = 0
        self._refresh = threading.Event()  # set on MOVED or a lost cluster node
        self._refreshed = 0.0
        self._lock = threading.Lock()

    def start(self) -> Watch:
        for url in self.urls:
            self._topology(url)
        return self

    def _topology(self, url: str) -> None:
        """One watch for a plain node, one per primary for a cluster (CLUSTER SLOTS)."""
        s = parse_redis_url(url)
        probe = client_from_url(s, socket_timeout=2.0, socket_connect_timeout=2.0)
        try:
            slots = probe.execute_command("CLUSTER", "SLOTS")
        except redis.ResponseError:  # cluster support disabled: a plain node
            slots = None
        except redis.RedisError as exc:
            logger.warning(
                "watch: %s unreachable (%s); watching it as one node", f"{s.host}:{s.port}", exc
            )
            slots = None
        finally:
            probe.close()
        if not slots:
            nw = NodeWatch(url, f"{s.host}:{s.port}", self.bus, self.origin, self.wm)
            self._plain[url] = nw
            self.nodes.append(nw.start())
            return
        by_node: dict[str, NodeWatch] = {n.node: n for n in self.nodes}
        ranges: list[tuple[int, int, NodeWatch]] = []
        for rng in slots:
            lo, hi, primary = int(rng[0]), int(rng[1]), rng[2]
            host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
            port = int(primary[1])
            node = f"{host}:{port}"
            if node not in by_node:
                nurl = _node_url(url, host, port)
                by_node[node] = NodeWatch(
                    nurl, node, self.bus, self.origin, self.wm, on_moved=self._refresh.set
                ).start()
                self.nodes.append(by_node[node])
            ranges.append((lo, hi, by_node[node]))
        mine: dict[NodeWatch, list[tuple[int, int]]] = {}
        for _lo, _hi, nw in self._slots.get(url, []):
            mine.setdefault(nw, [])  # a primary that lost every slot covers none
        for lo, hi, nw in ranges:
            mine.setdefault(nw, []).append((lo, hi))
        for nw, rs in mine.items():
            nw.slots = tuple(sorted(rs))
        with self._lock:
            self._slots[url] = sorted(ranges, key=lambda r: r[0])

    def set_hot(self, keys: Iterable[bytes], seq: int = 0) -> None:
        """The current hot set, as announced up to notification ``seq`` (called at each
        tick, after the publish; never blocks on I/O)."""
        ks = frozenset(keys)
        now = time.monotonic()
        if self._slots and now - self._refreshed >= TOPOLOGY_REFRESH:
            self._refresh.set()  # a manual failover or a slot move need not cut a watch
        if ks == self._keys and seq == self._seq and not self._refresh.is_set():
            return
        self._keys, self._seq = ks, seq
        if self._refresh.is_set() and now - self._refreshed >= 1.0:  # at most 1/s
            self._refresh.clear()
            self._refreshed = now
            threading.Thread(
                target=self._refresh_all, name="hotkeyd-watch-topology", daemon=True
            ).start()
        self._assign()

    def _assign(self) -> None:
        per: dict[NodeWatch, set[bytes]] = {n: set() for n in self.nodes}
        with self._lock:
            plain = list(self._plain.values())
            clusters = list(self._slots.values())
        for nw in plain:
            per[nw] = set(self._keys)
        for ranges in clusters:
            for k in self._keys:
                slot = key_slot(k)
                for lo, hi, nw in ranges:
                    if lo <= slot <= hi:
                        per[nw].add(k)
                        break
        for nw, ks in per.items():
            nw.set_keys(frozenset(ks), self._seq)

    def _refresh_all(self) -> None:
        """Slots moved: reread every cluster's topology, then reassign the keys."""
        for url in list(self._slots):
            try:
                self._topology(url)
            except Exception as exc:
                logger.warning("watch: topology refresh failed: %s", exc)
        self._assign()

    def problems(self) -> list[str]:
        """Why /healthz should say degraded (one line per node whose watch is down)."""
        return [f"watch {n.node}: {n.error or 'connecting'}" for n in self.nodes if not n.connected]

    def close(self, timeout: float = 2.0) -> None:
        for n in self.nodes:
            n.close(timeout)
        self.bus.close()


def _node_url(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (credentials and options kept)."""
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    auth = p.netloc.rpartition("@")[0]
    netloc = (auth + "@" if auth else "") + f"{host}:{port}"
    return urlunsplit((p.scheme, netloc, "", p.query, ""))
