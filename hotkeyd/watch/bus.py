"""Where the watch publishes: invalidations and heartbeats on the bus Redis."""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis

from hotkeyd.conn.cluster import is_cluster, publish_command, pubsub_node
from hotkeyd.conn.redis import open_client
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

logger = logging.getLogger("hotkeyd.watch")


class _Bus:
    """Publishes invalidations and heartbeats on the bus Redis (thread-safe: a pool)."""

    def __init__(self, url: str, namespace: Namespace, auth: MessageAuth | None) -> None:
        self.url = url
        self.client: Any = None
        self.namespace = namespace
        self.auth = auth
        self.cmd = publish_command(namespace.sharded)
        self.warn = RateLimitedLog(logger)
        self._lock = threading.Lock()
        self._local = threading.local()  # each watch thread's own bus connection
        self._conns: list[Any] = []

    def _client(self) -> Any:
        # SPUBLISH must reach the shard that owns the channel's slot, and a PUBLISH is
        # fastest on the node where the SDKs subscribe: on a cluster bus both take a
        # cluster client (a plain one to the URL's node got MOVED whenever the channel
        # hashed elsewhere: invalidations lost in 2 namespaces of 3). Opened on first
        # use, since asking whether the node is in a cluster is I/O.
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
            client = self._client()
            if self.namespace.sharded:
                client.execute_command(self.cmd, channel, body)
            elif is_cluster(client):
                home = pubsub_node(client, self.namespace.invalidate_channel)
                try:
                    client.execute_command(self.cmd, channel, body, target_nodes=home)
                    return True
                except (redis.ConnectionError, redis.TimeoutError):
                    pass  # the home node failed: routed by slot below (retries, new topology)
                client.execute_command(self.cmd, channel, body)
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
