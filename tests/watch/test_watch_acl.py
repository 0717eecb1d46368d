"""The watch's least-privilege ACL on Redis 7 (docs/consistency.md#acl), like
tests/faults/test_acl_roles.py: the daemon runs with a bus user and a watch user that
has only what the watch needs, does its job, and the watch user can do nothing else."""

from __future__ import annotations

import operator
from functools import partial

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess
from tests.client.helpers import wait_until
from tests.faults.test_acl_roles import _noperm, _url

from .test_watch import _Load

pytestmark = pytest.mark.integration

P = "hotkeyd"
# The bus side of the daemon (publisher, snapshots, demand) plus the watch's two channels.
BUS = (
    f"resetchannels ~{{{P}}}:* &{P}:events &{P}:demand:* &{P}:invalidate &{P}:watch "
    "+set +pexpire +zadd +zrem +zremrangebyscore +del +xadd +xtrim +publish +subscribe +multi "
    "+exec +ping"
)
# The watch connection on the data Redis: tracking, and EXISTS (read) on the data keys.
WATCH = "resetchannels %R~app:* +client|tracking +client|caching +exists +ping"


def test_watch_works_with_its_least_privilege_acl(redis_server: RedisServer) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    for user, rules in (("bus", BUS), ("watch", WATCH)):
        admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{user}-pw-0123456789", *rules.split()
        )
    key = b"app:item"
    admin.set(key, b"v1")
    with DaemonProcess(
        "--redis-url", _url(redis_server, "bus"),
        "--watch-url", _url(redis_server, "watch"),
        "--window", "0.5",
    ) as d, _Load(d, {key: 3000.0}):  # fmt: skip
        cache = HotCache.from_url(redis_server.url)
        try:
            assert wait_until(lambda: key in cache.hotset, timeout=10), d.stderr
            # Available mode serves a copy from the announcement on; the watch arms the key
            # just after it (docs/consistency.md): this test is about the ACL, not that gap.
            assert wait_until(lambda: d.metric("hotkeyd_watch_keys") >= 1, timeout=5), d.stderr
            assert cache.get(key) == b"v1"
            admin.set(key, b"v2")  # a direct write
            assert wait_until(lambda: key not in cache.local, timeout=0.5), d.stderr
            assert cache.get(key) == b"v2"
            assert d.health() == "ok", d.stderr
            assert "NOPERM" not in d.stderr and "Traceback" not in d.stderr, d.stderr
            assert "no permissions" not in d.stderr, d.stderr
        finally:
            cache.close()
    w = redis.Redis.from_url(_url(redis_server, "watch"))
    assert _noperm(lambda: w.get(key))  # no value is ever read
    assert _noperm(lambda: w.set(key, b"x"))
    assert _noperm(lambda: w.exists(f"{{{P}}}:instances"))  # only the data keys
    assert _noperm(lambda: w.publish(f"{P}:invalidate", b"{}"))
    assert _noperm(lambda: w.execute_command("MONITOR"))


def test_a_watch_without_its_acl_is_reported_degraded(redis_server: RedisServer) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command(
        "ACL", "SETUSER", "weak", "on", ">weak-pw-0123456789", "resetchannels", "+ping"
    )
    with DaemonProcess(
        "--redis-url", redis_server.url, "--watch-url", _url(redis_server, "weak"), "--window", "0.5"
    ) as d:  # fmt: skip
        assert wait_until(lambda: d.health() == "degraded", timeout=5), d.stderr
        assert d.metric("hotkeyd_watch_up") == 0


def test_keys_the_acl_allows_are_armed_beside_keys_it_refuses(redis_server: RedisServer) -> None:
    # The watch arms many keys with one EXISTS; an ACL that allows some of them only
    # refuses that EXISTS whole (NOPERM). The allowed keys must still be armed (key by
    # key), and their writes still reach the apps.
    admin = redis.Redis.from_url(redis_server.url)
    for user, rules in (("bus", BUS), ("watch", WATCH)):
        admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{user}-pw-0123456789", *rules.split()
        )
    allowed = [b"app:item%d" % i for i in range(4)]
    refused = [b"other:item%d" % i for i in range(4)]
    for k in allowed + refused:
        admin.set(k, b"v1")
    with DaemonProcess(
        "--redis-url", _url(redis_server, "bus"),
        "--watch-url", _url(redis_server, "watch"),
        "--window", "0.5",
    ) as d, _Load(d, dict.fromkeys(allowed + refused, 3000.0)):  # fmt: skip
        cache = HotCache.from_url(redis_server.url)
        try:
            assert wait_until(lambda: all(k in cache.hotset for k in allowed), timeout=10)
            assert wait_until(lambda: d.metric("hotkeyd_watch_keys") >= 4, timeout=5), d.stderr
            assert d.metric("hotkeyd_watch_keys") == 4  # the refused ones are not watched
            for k in allowed:
                assert cache.get(k) == b"v1"
                assert wait_until(partial(operator.contains, cache.local, k), timeout=2)
                admin.set(k, b"v2")  # a direct write
                gone = partial(lambda key: key not in cache.local, k)
                assert wait_until(gone, timeout=0.5), d.stderr
                assert cache.get(k) == b"v2"
            assert "NOPERM" in d.stderr or "no permissions" in d.stderr, d.stderr  # logged
        finally:
            cache.close()
