"""Following the events channel through Redis outages (``hotkeyd watch``).

Pub/sub is fire-and-forget: events published while disconnected are lost, so after a
reconnect a watcher reports the gap and carries on; ``hotkeyd top`` shows the state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
import redis.exceptions as rexc
from redis.cluster import RedisCluster

from hotkeyd.backoff import Backoff
from hotkeyd.conn.redis import translate_redis_error
from hotkeyd.conn.urls import redact_url

__all__ = ["follow_channel"]


def follow_channel(
    client: redis.Redis | RedisCluster,
    channel: str,
    on_data: Callable[[bytes | str], None],
    *,
    count: int = 0,
    notice: Callable[[str], None] = lambda line: None,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    where: str = "",
    sharded: bool = False,
) -> int:
    """Call ``on_data`` with each message payload; return how many were seen.

    Runs until ``count`` messages were seen (0: forever). A connection lost *after*
    the first subscribe is retried with ``backoff`` (``notice`` hears about it, and
    about the reconnect); each attempt closes the previous pub/sub connection.
    ``where`` (a Redis URL; passwords are masked) names the server in messages.
    ``sharded`` follows a sharded channel (SSUBSCRIBE; ``--sharded-pubsub`` daemons).

    Raises:
        UnreachableError, PublishError: the first connection failed, or Redis
            answered with an error (ACL, auth): retrying would not help.
    """
    backoff = backoff or Backoff(base=0.1, cap=5.0)
    seen, connected_once = 0, False
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            if sharded:
                pubsub.ssubscribe(channel)
            else:
                pubsub.subscribe(channel)
            if connected_once:
                notice(f"reconnected to {redact_url(where) or 'Redis'}")
            connected_once = True
            backoff.reset()
            for raw in _messages(pubsub, sharded):
                data = raw.get("data")
                if isinstance(data, (bytes, str)):
                    on_data(data)
                    seen += 1
                    if count and seen >= count:
                        return seen
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            if not connected_once:
                raise translate_redis_error(exc, where) from exc
            delay = backoff.next_delay()
            notice(f"connection lost ({exc}); reconnecting in {delay:.1f}s")
            sleep(delay)
        except rexc.RedisError as exc:
            raise translate_redis_error(exc, where) from exc
        finally:
            pubsub.close()


def _messages(pubsub: Any, sharded: bool) -> Iterator[dict[str, Any]]:
    """Messages as they arrive (a cluster's sharded pub/sub has no ``listen()``)."""
    if not (sharded and hasattr(pubsub, "get_sharded_message")):
        yield from pubsub.listen()
        return
    while True:
        m = pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=1.0)
        if m is not None:
            yield m
