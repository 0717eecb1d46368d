"""Redis Cluster: client types, and publishing to a node *or* a cluster.

A URL names one node. :func:`hotkeyd.conn.redis.open_client` asks that node
``INFO cluster`` and, when it says ``cluster_enabled:1``, returns a ``redis.cluster.RedisCluster`` that discovers the other
nodes and follows MOVED/ASK; otherwise a plain ``redis.Redis``. The URL option
``?cluster=yes`` (or ``no``) skips the question, for a user without INFO rights.

Everything hotkeyd stores shares one hash tag (``{prefix}``, see
:class:`hotkeyd.protocol.wire.Namespace`), so each of the daemon's MULTI/EXEC stays in one slot.
PUBLISH is the only command that a cluster pipeline refuses; :func:`publish_many` sends
a batch of messages to one node in one round trip instead (PUBLISH reaches every node
over the cluster bus; SPUBLISH goes to the node that owns the channel's slot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from hotkeyd.conn.redis import REDIS_ERRORS, cluster_enabled, translate_redis_error

__all__ = [
    "AnyAsyncRedis",
    "AnyRedis",
    "AsyncRedisCluster",
    "RedisCluster",
    "aclient_from_url",
    "apublish",
    "client_db",
    "client_from_any_url",
    "dedicated_client",
    "is_cluster",
    "publish",
    "publish_command",
    "publish_many",
    "pubsub_node",
]

AnyRedis: TypeAlias = "redis.Redis | RedisCluster"
AnyAsyncRedis: TypeAlias = "aredis.Redis | AsyncRedisCluster"


def is_cluster(client: Any) -> bool:
    """True for a sync or asyncio ``RedisCluster`` client."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def client_db(client: Any) -> int:
    """The db a client talks to (a cluster has only db 0)."""
    if is_cluster(client):
        return 0
    return int(client.connection_pool.connection_kwargs.get("db", 0) or 0)


def dedicated_client(client: Any, *, db: int | None = None, max_connections: int = 2) -> Any:
    """A client with a pool of its own on the same server, credentials and TLS.

    For a long-lived subscription: it never holds a connection of the application's
    pool (a ``BlockingConnectionPool(max_connections=1)`` would deadlock), and ``db``
    may differ from the application's (the daemon's snapshots live in its own db).
    Sync and ``redis.asyncio`` clients; a cluster client is returned as it is (db 0
    only, and its pools are per node).
    """
    if is_cluster(client):
        return client
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    if db is not None:
        kwargs["db"] = db
    if isinstance(client, aredis.Redis):
        apool = aredis.ConnectionPool(
            connection_class=pool.connection_class, max_connections=max_connections, **kwargs
        )
        return aredis.Redis.from_pool(apool)  # owns the pool: closing it disconnects
    own = redis.ConnectionPool(
        connection_class=pool.connection_class, max_connections=max_connections, **kwargs
    )
    return redis.Redis.from_pool(own)  # owns the pool: closing it disconnects


def client_from_any_url(url: str, **kwargs: Any) -> AnyRedis:
    """``redis.Redis.from_url``, or ``RedisCluster.from_url`` when the node is in a cluster.

    redis-py's own URL rules apply (any ``from_url`` option); the node is asked
    ``INFO cluster`` now.

    Raises:
        UnreachableError, PublishError: the node could not be asked (the real cause).
    """
    client = redis.Redis.from_url(url, **kwargs)
    try:
        enabled = cluster_enabled(client)
    except REDIS_ERRORS as exc:
        client.close()
        raise translate_redis_error(exc, url) from exc
    if not enabled:
        return client
    client.close()
    try:
        return RedisCluster.from_url(url, **kwargs)
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc, url) from exc


async def aclient_from_url(url: str, **kwargs: Any) -> AnyAsyncRedis:
    """:func:`client_from_any_url` for ``redis.asyncio`` (the cluster is initialized)."""
    client: Any = aredis.Redis.from_url(url, **kwargs)  # Any: the stubs lag redis-py 5+
    try:
        info = await client.info("cluster")
        enabled = bool(int(info.get("cluster_enabled", 0) or 0))
    except redis.ResponseError:  # no INFO rights: a plain client
        enabled = False
    except REDIS_ERRORS as exc:
        await client.aclose()
        raise translate_redis_error(exc, url) from exc
    if not enabled:
        return client
    await client.aclose()
    cluster: Any = AsyncRedisCluster.from_url(url, **kwargs)
    try:
        await cluster.initialize()
    except REDIS_ERRORS as exc:
        await cluster.aclose()
        raise translate_redis_error(exc, url) from exc
    return cluster


def pubsub_node(client: RedisCluster, channel: str) -> Any:
    """The primary where plain pub/sub of a namespace meets on a cluster: the owner of
    the slot of ``channel``, its invalidation channel (the SDKs subscribe there; a PUBLISH
    sent elsewhere crosses the cluster bus, whose outgoing links Redis 7.0 leaves with
    Nagle's algorithm on: up to 40 ms more under load)."""
    return client.get_node_from_key(channel)


def publish_command(sharded: bool) -> str:
    """``SPUBLISH`` for sharded pub/sub, else ``PUBLISH``."""
    return "SPUBLISH" if sharded else "PUBLISH"


def publish(client: Any, channel: str, payload: bytes, *, sharded: bool = False) -> Any:
    """PUBLISH (or SPUBLISH) one message through a sync client, cluster or not."""
    return client.execute_command(publish_command(sharded), channel, payload)


async def apublish(client: Any, channel: str, payload: bytes, *, sharded: bool = False) -> Any:
    """PUBLISH (or SPUBLISH) one message through a ``redis.asyncio`` client."""
    return await client.execute_command(publish_command(sharded), channel, payload)


def publish_many(
    client: AnyRedis, channel: str, payloads: Sequence[bytes], *, sharded: bool = False
) -> None:
    """Send ``payloads`` in order, in one round trip, to a node or a cluster.

    On a cluster they go to one node: the channel's slot owner for SPUBLISH, the
    client's default node for PUBLISH (the cluster bus forwards it to every node).
    """
    if not payloads:
        return
    command = publish_command(sharded)
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(channel) if sharded else client.get_default_node()
        if node is None:
            raise RedisClusterException(f"no cluster node serves channel {channel!r}")
        target: redis.Redis = client.get_redis_connection(node)
    else:
        target = client
    pipe = target.pipeline(transaction=False)
    for payload in payloads:
        pipe.execute_command(command, channel, payload)
    pipe.execute()
