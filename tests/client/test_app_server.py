"""App-server realities: fork (gunicorn --preload), failed starts, another db, tiny pools."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hotkeyd.client import AsyncHotCache, HotCache, Namespace
from hotkeyd.errors import PublishError, UnreachableError
from hotkeyd.testing import RedisClusterServers, RedisServer, free_port, wait_for_port
from tests.service.daemon import Daemon

from .helpers import FakeDaemon, wait_until

pytestmark = pytest.mark.integration


def _subscriber_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "hotkeyd-subscriber")


def test_acl_denial_fails_fast_with_the_real_cause(
    redis_server: RedisServer, ns: Namespace
) -> None:
    admin = redis.Redis(port=redis_server.port)
    admin.execute_command("ACL", "SETUSER", "nosub", "on", ">pw", "~*", "+@read", "+ping")
    before = _subscriber_threads()
    t0 = time.monotonic()
    with pytest.raises(PublishError, match="permission"):
        HotCache.from_url(f"redis://nosub:pw@127.0.0.1:{redis_server.port}/0", namespace=ns)
    assert time.monotonic() - t0 < 5  # not the 10 s start timeout: retrying cannot help
    assert wait_until(lambda: _subscriber_threads() == before, 2)  # no leaked thread
    admin.close()


def test_unreachable_redis_names_the_connection_error() -> None:
    before = _subscriber_threads()
    client = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    cache = HotCache(client)
    with pytest.raises(UnreachableError, match=r"not ready after 1 s: .*(refused|111)"):
        cache.start(timeout=1.0)
    assert wait_until(lambda: _subscriber_threads() == before, 2)
    cache.client.close()


def test_moved_on_a_plain_client_fails_fast(
    redis_cluster: RedisClusterServers, unique: str
) -> None:
    ns = Namespace(f"hk{unique}")
    owner = redis_cluster.node_for(ns.instances)
    other = next(n for n in redis_cluster.nodes if n is not owner)
    client = redis.Redis(port=other.port)
    t0 = time.monotonic()
    with pytest.raises(PublishError, match="Redis Cluster node"):
        HotCache(client, namespace=ns).start()
    assert time.monotonic() - t0 < 5
    client.close()


def test_an_app_on_db_3_bootstraps_from_the_daemons_db_0(
    redis_server: RedisServer, ns: Namespace
) -> None:
    daemon = FakeDaemon(redis.Redis(port=redis_server.port, db=0), ns)
    daemon.make_hot(b"item:1")  # the daemon publishes to /0
    app = redis.Redis(port=redis_server.port, db=3)
    with HotCache(app, namespace=ns) as cache:
        assert b"item:1" in cache.hotset  # from the snapshot in db 0
    app.close()


def test_a_pool_of_one_connection_does_not_deadlock(
    redis_server: RedisServer, ns: Namespace
) -> None:
    pool = redis.BlockingConnectionPool(port=redis_server.port, max_connections=1, timeout=2)
    app = redis.Redis(connection_pool=pool)
    with HotCache(app, namespace=ns) as cache:  # the subscriber has a connection of its own
        cache.set("k", b"v")
        assert cache.get("k") == b"v"
    app.close()


def test_async_hotcache_from_url_and_mget(redis_server: RedisServer, ns: Namespace) -> None:
    daemon = FakeDaemon(redis.Redis(port=redis_server.port), ns)

    async def main() -> None:
        cache = await AsyncHotCache.from_url(redis_server.url, namespace=ns)
        try:
            await cache.set("a", b"1")
            await cache.set("b", b"2")
            daemon.make_hot(b"a")
            deadline = time.monotonic() + 5
            while b"a" not in cache.hotset:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert await cache.mget(["a", "b", "missing"]) == [b"1", b"2", None]
            hits = cache.stats.hits
            assert await cache.mget("a", "b") == [b"1", b"2"]
            assert cache.stats.hits == hits + 1  # "a" came from the local copy
        finally:
            await cache.close()  # also closes the client from_url made

    asyncio.run(main())
    with pytest.raises(UnreachableError):
        asyncio.run(AsyncHotCache.from_url(f"redis://127.0.0.1:{free_port()}/0"))


_WSGI_APP = """
import json, os, threading
from hotkeyd.client import HotCache, Namespace

url = os.environ["HK_REDIS_URL"]
cache = HotCache.from_url(
    url, namespace=Namespace(os.environ["HK_NS"]), tracking=os.environ["HK_TRACKING"], tracking_url=url
)


def app(environ, start_response):
    value = cache.get("hot:item")
    body = json.dumps({
        "pid": os.getpid(),
        "value": value.decode() if value else None,
        "hot": b"hot:item" in cache.hotset,
        "hits": cache.stats.hits,
        "subscriber": any(t.name == "hotkeyd-subscriber" for t in threading.enumerate()),
        "reported": cache.demand_stats.accesses if cache.demand_stats else -1,
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Connection", "close")])
    return [body]
"""


def _ask(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


@pytest.mark.parametrize("tracking", ["off", "optin"])
def test_gunicorn_preload_workers_both_serve_the_hot_key_locally(
    redis_server: RedisServer, ns: Namespace, tmp_path: Path, tracking: str
) -> None:
    (tmp_path / "hkapp.py").write_text(_WSGI_APP)
    redis.Redis(port=redis_server.port).set("hot:item", "v1")
    port = free_port()
    env = {"HK_REDIS_URL": redis_server.url, "HK_NS": ns.prefix, "HK_TRACKING": tracking}
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-b", f"127.0.0.1:{port}",
         "--chdir", str(tmp_path), "hkapp:app"],
        env={**__import__("os").environ, **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for_port(port, timeout=20)
        with Daemon("--redis-url", redis_server.url, "--namespace", ns.prefix) as d:
            d.feed_rate({b"hot:item": 3000.0}, 1.5)  # the daemon finds it hot
            workers: dict[int, dict[str, Any]] = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                d.feed_rate({b"hot:item": 3000.0}, 0.05)  # keep it hot
                doc = _ask(port)
                workers[doc["pid"]] = doc
                if len(workers) == 2 and all(
                    w["hot"] and int(w["hits"]) > 0 and w["reported"] > 0 for w in workers.values()
                ):
                    break
            assert len(workers) == 2, workers
            for w in workers.values():
                assert w["subscriber"] and w["hot"] and w["value"] == "v1", w
                assert int(w["hits"]) > 0, w
            if tracking != "off":  # a write that bypasses HotCache: only Redis tells them
                redis.Redis(port=redis_server.port).set("hot:item", "v2")
                seen: dict[int, str] = {}
                t0 = time.monotonic()
                while len(seen) < 2 or set(seen.values()) != {"v2"}:
                    assert time.monotonic() - t0 < 1.0, seen  # well under the key's TTL
                    d.feed_rate({b"hot:item": 3000.0}, 0.02)
                    doc = _ask(port)
                    seen[doc["pid"]] = doc["value"]
            assert w["reported"] > 0, w  # each worker reports what it served (demand reports)
    finally:
        gunicorn.terminate()
        _, err = gunicorn.communicate(timeout=20)
    assert b"Traceback" not in err, err.decode()


def test_drop_in_other_commands_pass_through_and_pipeline_writes_invalidate(
    redis_server: RedisServer, ns: Namespace
) -> None:
    daemon = FakeDaemon(redis.Redis(port=redis_server.port), ns)
    with (
        HotCache(redis.Redis(port=redis_server.port), namespace=ns) as writer,
        HotCache(redis.Redis(port=redis_server.port), namespace=ns) as reader,
    ):
        writer.set("k", b"v1")
        assert writer.exists("k") == 1 and writer.ttl("k") == -1  # plain pass-through
        daemon.make_hot(b"k", b"h")
        assert wait_until(lambda: b"k" in reader.hotset and b"h" in reader.hotset)
        assert reader.get("k") == b"v1"  # cached in the reader now
        with writer.pipeline() as pipe:
            pipe.set("k", b"v2").incr("counter")
            assert pipe.execute() == [True, 1]  # the invalidation's reply is not shown
        assert wait_until(lambda: reader.get("k") == b"v2", 2)
        writer.hset("h", "f", "1")
        assert reader.hgetall("h") == {b"f": b"1"}
        writer.hsetnx("h", "g", "2")  # a write HotCache has no method for: passes, invalidates
        assert wait_until(lambda: reader.hgetall("h") == {b"f": b"1", b"g": b"2"}, 2)
        writer.getset("k", b"v3")
        assert wait_until(lambda: reader.get("k") == b"v3", 2)
        writer.client.close()
        reader.client.close()


def test_async_pipeline_writes_invalidate(redis_server: RedisServer, ns: Namespace) -> None:
    daemon = FakeDaemon(redis.Redis(port=redis_server.port), ns)

    async def main() -> None:
        writer = await AsyncHotCache.from_url(redis_server.url, namespace=ns)
        reader = await AsyncHotCache.from_url(redis_server.url, namespace=ns)
        try:
            await writer.set("k", b"v1")
            daemon.make_hot(b"k")
            while b"k" not in reader.hotset:
                await asyncio.sleep(0.01)
            assert await reader.get("k") == b"v1"
            assert await writer.exists("k") == 1
            async with writer.pipeline() as pipe:
                pipe.set("k", b"v2")
                assert await pipe.execute() == [True]
            deadline = time.monotonic() + 2
            while await reader.get("k") != b"v2":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(main())


def test_a_wrong_type_index_fails_fast(redis_server: RedisServer, ns: Namespace) -> None:
    r = redis.Redis(port=redis_server.port)
    r.set(ns.instances, "not a sorted set")  # e.g. an old tool wrote there
    t0 = time.monotonic()
    with pytest.raises(PublishError, match="WRONGTYPE"):
        HotCache(r, namespace=ns).start()
    assert time.monotonic() - t0 < 5
    r.close()
