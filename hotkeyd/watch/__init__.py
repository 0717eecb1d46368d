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

On a cluster each heartbeat follows a ``CLUSTER SLOTS`` round trip on the tracking
connection, which proves the node still owns, as a primary, the slots its heartbeat
claims. A failover (the node demoted) or a slot move shows there at once: the watch
drops the lost slots from its claim and bumps its epoch before the next heartbeat (so no
strict app serves a copy it vouched for, even if the slots come back), and the topology
is re-read from that reply, so the new owner is armed within a round trip or two rather
than at the next periodic re-read. A node claims slots it gained only once every hot key
in them is armed there, and then broadcasts those keys (cause ``moved``): a write that
reached the new owner before its arming is dropped too.

On a cluster bus, invalidations and heartbeats go to the primary that owns the slot of
the invalidation channel (:func:`hotkeyd.conn.cluster.pubsub_node`), the node where every
SDK subscribes: a PUBLISH to any other node reaches the subscribers over the cluster bus,
whose outgoing links Redis 7.0 leaves with Nagle's algorithm on (up to 40 ms more).

``HOTKEYD_WATCH_TRACE=FILE`` (a diagnostic) appends one line per key broadcast:
``<node> <cause> <ns the push was read> <ns the PUBLISH returned> <key in hex>``, in
CLOCK_MONOTONIC nanoseconds (the stale-read harness attributes each write's delay to a
stage with it).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import redis
from redis.crc import key_slot

from hotkeyd.conn.redis import client_from_url, parse_redis_url
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Namespace
from hotkeyd.watch.bus import _Bus
from hotkeyd.watch.metrics import WatchMetrics
from hotkeyd.watch.node import (
    HEARTBEAT_INTERVAL,
    MAX_REARM_SPACING,
    REARM_BUDGET,
    REARM_SPACING,
    NodeWatch,
    rearm_spacing,
)
from hotkeyd.watch.slots import _merge

__all__ = [
    "HEARTBEAT_INTERVAL",
    "MAX_REARM_SPACING",
    "REARM_BUDGET",
    "REARM_SPACING",
    "NodeWatch",
    "Watch",
    "WatchMetrics",
    "rearm_spacing",
]

logger = logging.getLogger(__name__)

TOPOLOGY_REFRESH = 5.0
"""Seconds between two reads of a cluster's topology (also read on MOVED or a lost node)."""


class Watch:
    """Every node's watch for the daemon: the hot set in, invalidations out.

    Args:
        urls: the data Redis servers (``--watch-url``); a node of a cluster expands to
            one watch per primary, and each key is armed on the primary owning its slot.
        bus_url: the bus Redis (``--redis-url``) where invalidations and heartbeats go.
        namespace, origin, auth, metrics: as the daemon's publisher.
        rearm_budget: re-arms per second each node's watch may cost its Redis
            (``--watch-rearm-budget``; 0: none); see :data:`REARM_BUDGET`.
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
        rearm_budget: int = REARM_BUDGET,
    ) -> None:
        self.urls = list(urls)
        self.rearm_budget = rearm_budget
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
        self._topo_lock = threading.Lock()  # one topology change applied at a time
        self._assign_lock = threading.Lock()

    def start(self) -> Watch:
        for url in self.urls:
            self._topology(url)
        self._assign()  # every cluster node learns its slots
        return self

    def _topology_from(self, url: str, reply: Any) -> None:
        """A node's watch saw its slots change: apply the topology of its reply now."""
        try:
            with self._topo_lock:
                self._topology(url, reply)
            self._assign()
        except Exception as exc:  # the periodic re-read retries
            logger.warning("watch: applying a topology change failed: %s", exc)
            self._refresh.set()

    def _topology(self, url: str, reply: Any = None) -> None:
        """One watch for a plain node, one per primary for a cluster (CLUSTER SLOTS)."""
        if reply:
            self._cluster(url, reply)
            return
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
            nw = NodeWatch(
                url, f"{s.host}:{s.port}", self.bus, self.origin, self.wm,
                rearm_budget=self.rearm_budget,
            )  # fmt: skip
            self._plain[url] = nw
            self.nodes.append(nw.start())
            return
        self._cluster(url, slots)

    def _cluster(self, url: str, slots: Any) -> None:
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
                    nurl, node, self.bus, self.origin, self.wm,
                    on_moved=self._refresh.set,
                    on_slots=functools.partial(self._topology_from, url),
                    rearm_budget=self.rearm_budget,
                ).start()  # fmt: skip
                self.nodes.append(by_node[node])
            ranges.append((lo, hi, by_node[node]))
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
        # The tick and a watch thread (a topology change) may both assign: one at a time,
        # so the last to run hands every node the newest slots, never an older view.
        with self._assign_lock:
            self._assign_locked()

    def _assign_locked(self) -> None:
        per: dict[NodeWatch, set[bytes]] = {n: set() for n in self.nodes}
        owns: dict[NodeWatch, list[tuple[int, int]]] = {}
        with self._lock:
            plain = list(self._plain.values())
            clusters = list(self._slots.values())
        for nw in plain:
            per[nw] = set(self._keys)
        for ranges in clusters:
            for lo, hi, nw in ranges:
                owns.setdefault(nw, []).append((lo, hi))
            for k in self._keys:
                slot = key_slot(k)
                for lo, hi, nw in ranges:
                    if lo <= slot <= hi:
                        per[nw].add(k)
                        break
        for nw, ks in per.items():
            # a cluster primary that lost every slot covers none
            slots = _merge(owns.get(nw, [])) if nw.on_slots is not None else None
            nw.set_keys(frozenset(ks), self._seq, slots)

    def _refresh_all(self) -> None:
        """Slots moved: reread every cluster's topology, then reassign the keys."""
        for url in list(self._slots):
            try:
                with self._topo_lock:
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
