"""Server-assisted invalidation (CLIENT TRACKING, RESP3) for promoted keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .helpers import FakeDaemon, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server(any_redis_server: RedisServer) -> RedisServer:
    """Every test here runs on redis-server and on valkey-server."""
    return any_redis_server


@pytest.fixture(params=["optin", "bcast"])
def tracked(
    request: pytest.FixtureRequest, redis_server: RedisServer, ns: Namespace, daemon: FakeDaemon
) -> Iterator[HotCache]:
    daemon.write_snapshot()
    c = HotCache(
        redis.Redis.from_url(redis_server.url),
        namespace=ns,
        tracking=request.param,
        tracking_url=redis_server.url,
        tracking_prefixes=["item:"],
    ).start()
    yield c
    c.close()
    c.client.close()


def test_write_by_a_plain_client_drops_the_local_copy(
    tracked: HotCache, r: redis.Redis, daemon: FakeDaemon
) -> None:
    r.set("item:1", b"old")
    daemon.make_hot(b"item:1", ttl_ms=60_000)
    assert wait_until(lambda: b"item:1" in tracked.hotset)
    # (A refresh that meets the push of the earlier SET is not stored: retry once.)
    assert wait_until(lambda: tracked.get("item:1") == b"old" and b"item:1" in tracked.local)
    r.set("item:1", b"new")  # not through HotCache: no pub/sub invalidation is sent
    assert wait_until(lambda: b"item:1" not in tracked.local, timeout=1.0)
    assert tracked.get("item:1") == b"new"
    assert tracked._tracking is not None and tracked._tracking.pushes >= 1


def test_flushall_clears_everything(tracked: HotCache, r: redis.Redis, daemon: FakeDaemon) -> None:
    r.set("item:2", b"v")
    daemon.make_hot(b"item:2", ttl_ms=60_000)
    assert wait_until(lambda: b"item:2" in tracked.hotset)
    assert wait_until(lambda: tracked.get("item:2") == b"v" and b"item:2" in tracked.local)
    r.flushall()
    assert wait_until(lambda: len(tracked.local) == 0, timeout=1.0)


def test_error_reply_keeps_the_tracking_connection_usable(
    tracked: HotCache, r: redis.Redis, daemon: FakeDaemon
) -> None:
    r.hset("item:h", mapping={"f": "1"})
    r.set("item:s", b"ok")
    daemon.make_hot(b"item:h", b"item:s", ttl_ms=60_000)
    assert wait_until(lambda: len(tracked.hotset) == 2)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tracked.get("item:h")
    assert tracked.get("item:s") == b"ok"
    assert tracked.hgetall("item:h") == {b"f": b"1"}
