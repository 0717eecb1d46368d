"""Following the events channel through Redis outages (``hotkeyd watch``).

Pub/sub is fire-and-forget: events published while disconnected are lost, so after a
reconnect a watcher reports the gap and carries on; ``hotkeyd top`` shows the state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
) -> int:
    """Call ``on_data`` with each message payload; return how many were seen.

    Runs until ``count`` messages were seen (0: forever). A connection lost *after*
    the first subscribe is retried with ``backoff`` (``notice`` hears about it, and
    about the reconnect); each attempt closes the previous pub/sub connection.
    ``where`` (a Redis URL; passwords are masked) names the server in messages.

    Raises:
        UnreachableError, PublishError: the first connection failed, or Redis
            answered with an error (ACL, auth): retrying would not help.
    """
    backoff = backoff or Backoff(base=0.1, cap=5.0)
    seen, connected_once = 0, False
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel)
            if connected_once:
                notice(f"reconnected to {redact_url(where) or 'Redis'}")
            connected_once = True
            backoff.reset()
            for raw in pubsub.listen():
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
