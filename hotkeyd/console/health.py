"""``hotkeyd check``: is a daemon alive? Asked over its HTTP endpoint or its Redis heartbeat."""

from __future__ import annotations

import json

import redis
import redis.exceptions as rexc
from redis.cluster import RedisCluster

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.http import http_get
from hotkeyd.conn.redis import translate_redis_error
from hotkeyd.errors import HotkeydError
from hotkeyd.protocol.wire import Namespace

__all__ = ["check_heartbeat", "check_http", "newest_heartbeat"]


def check_http(base: str, *, strict: bool = False, timeout: float = 3.0) -> str:
    """Probe ``<base>/healthz``; return its status line (``ok: {...}``).

    A degraded daemon (Redis or a source unreachable) passes unless ``strict``.

    Raises:
        ConfigError: ``base`` is not an http:// URL.
        HotkeydError: unreachable, unhealthy, or degraded with ``strict``.
    """
    url = base.rstrip("/") + "/healthz"
    reply = http_get(url, timeout=timeout)
    if reply.status != 200:
        raise HotkeydError(f"unhealthy: {reply.status} {reply.text}")
    try:
        status = str(json.loads(reply.body).get("status", "ok"))
    except (ValueError, AttributeError):
        status = "ok"
    if strict and status != "ok":
        raise HotkeydError(f"degraded: {reply.text}")
    return f"{status}: {reply.text}"


def newest_heartbeat(client: redis.Redis | RedisCluster, namespace: Namespace) -> float | None:
    """Unix time of the freshest instance heartbeat, or None when there is none.

    Read-only (one ZREVRANGE), so a read-only ACL user can run it.

    Raises:
        UnreachableError, PublishError: Redis failed.
    """
    try:
        newest = client.zrevrange(namespace.instances, 0, 0, withscores=True)
    except (rexc.RedisError, OSError) as exc:
        raise translate_redis_error(exc) from exc
    return float(newest[0][1]) if newest else None


def check_heartbeat(
    client: redis.Redis | RedisCluster,
    namespace: Namespace,
    *,
    max_age: float,
    clock: Clock | None = None,
) -> str:
    """Pass when some instance wrote a heartbeat in the last ``max_age`` seconds.

    Raises:
        HotkeydError: no heartbeat, or the newest is too old; Redis failed.
    """
    newest = newest_heartbeat(client, namespace)
    if newest is None:
        raise HotkeydError("no hotkeyd instance has written a heartbeat")
    age = (clock or SystemClock()).time() - newest
    if age > max_age:
        raise HotkeydError(f"newest heartbeat is {age:.1f}s old (max {max_age}s)")
    return f"ok: heartbeat {age:.1f}s ago"
