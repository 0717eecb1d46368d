"""Least-privilege Redis ACLs, one user per role (docs/wire-format.md), on every server flavor.

Each role runs as a real process or SDK object with only its documented permissions and
does its job; the test also checks what each role must *not* be able to do (above all:
an application cannot publish events).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisServer
from tests.client.helpers import wait_until
from tests.service.daemon import Daemon

from .conftest import Load

pytestmark = pytest.mark.integration

P = "hotkeyd"
ROLES = {
    "daemon": f"resetchannels ~{{{P}}}:* &{P}:events &{P}:demand:* +set +pexpire +zadd +zrem "
    "+zremrangebyscore +del +xadd +xtrim +publish +subscribe +multi +exec +ping "
    # the watch of the hot keys (bus and data Redis are one here; tests/watch/test_watch_acl.py)
    f"&{P}:invalidate &{P}:watch %R~app:* +client|tracking +client|caching +exists",
    "app": f"resetchannels ~app:* %R~{{{P}}}:* +@read +@write +@connection -@pubsub +subscribe "
    f"+ping &{P}:events &{P}:invalidate &{P}:watch (+publish &{P}:invalidate &{P}:demand:*)",
    "top": f"resetchannels %R~{{{P}}}:* +get +mget +zrevrangebyscore +zrangebyscore +ping",
    "watch": f"resetchannels &{P}:events +subscribe +ping",
}


@pytest.fixture
def redis_server(any_redis_server: RedisServer) -> RedisServer:
    """Redis 7.0 and 8.2, Valkey 8.1 and 9.1: each version's ACL rules and categories."""
    return any_redis_server


def _url(rs: RedisServer, user: str) -> str:
    return f"redis://{user}:{user}-pw-0123456789@127.0.0.1:{rs.port}/0"


def _noperm(fn: object) -> bool:
    try:
        fn()  # type: ignore[operator]
    except redis.exceptions.NoPermissionError:
        return True
    except redis.exceptions.ResponseError as exc:
        return "NOPERM" in str(exc)
    return False


def test_every_role_works_with_its_least_privilege_acl(redis_server: RedisServer) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    for user, rules in ROLES.items():
        admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{user}-pw-0123456789", *rules.split()
        )
    admin.set("app:item", b"v1")
    with Daemon("--redis-url", _url(redis_server, "daemon"), "--window", "0.5") as d:
        cache = HotCache.from_url(_url(redis_server, "app"), report_demand=True)
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hotkeyd",
                "watch",
                "--redis-url",
                _url(redis_server, "watch"),
                "--json",
                "--count",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        load = Load(d, {b"app:item": 3000.0}).__enter__()  # hot for the whole test
        try:
            assert wait_until(lambda: b"app:item" in cache.hotset, timeout=10), d.stderr
            assert cache.get("app:item") == b"v1"
            cache.set("app:item", b"v2")  # publishes an invalidation: allowed
            assert cache.get("app:item") == b"v2"
            out, err = watch.communicate(timeout=20)
            assert watch.returncode == 0, err
            assert json.loads(out.splitlines()[0])["v"] == 1
            top = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hotkeyd",
                    "top",
                    "--redis-url",
                    _url(redis_server, "top"),
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert top.returncode == 0, top.stderr
            assert any(h["key"] == "app:item" for h in json.loads(top.stdout)["hot"]), top.stdout
            assert "NOPERM" not in d.stderr and "Traceback" not in d.stderr, d.stderr
            assert "no permissions" not in d.stderr, d.stderr  # e.g. the history's XADD
        finally:
            load.__exit__()
            if watch.poll() is None:
                watch.kill()
                watch.communicate()
            cache.close()
    # ... and what each must not do
    app = redis.Redis.from_url(_url(redis_server, "app"))
    top_c = redis.Redis.from_url(_url(redis_server, "top"))
    watch_c = redis.Redis.from_url(_url(redis_server, "watch"))
    daemon_c = redis.Redis.from_url(_url(redis_server, "daemon"))
    forged = b'{"v":1,"instance":"x","seq":1,"ts":1,"hot":[],"cool":[]}'
    assert _noperm(lambda: app.publish(f"{P}:events", forged))  # the point of it all
    assert _noperm(lambda: app.set(f"{{{P}}}:snapshot:x", forged))
    assert app.publish(f"{P}:demand:some-daemon", b"{}") == 0  # allowed
    assert _noperm(lambda: top_c.publish(f"{P}:events", forged))
    assert _noperm(lambda: top_c.set(f"{{{P}}}:snapshot:x", forged))
    assert _noperm(lambda: watch_c.get(f"{{{P}}}:instances"))
    assert _noperm(lambda: watch_c.publish(f"{P}:events", forged))
    assert _noperm(lambda: daemon_c.get("app:item"))
    # it publishes invalidations now (the watch), but reads and writes no data key
    assert _noperm(lambda: daemon_c.set("app:item", b"x"))
    for c in (app, top_c, watch_c, daemon_c, admin):
        c.close()


def test_a_demand_reporter_user_may_only_publish_demand(redis_server: RedisServer) -> None:
    """The ACL docs/wire-format.md gives a demand reporter ("what an unauthenticated app
    can do"): PUBLISH on the demand channels, nothing else."""
    admin = redis.Redis.from_url(redis_server.url)
    rules = f"on >reporter-pw-0123456789 resetchannels &{P}:demand:* -@all +publish"
    admin.execute_command("ACL", "SETUSER", "reporter", *rules.split())
    rep = redis.Redis.from_url(
        f"redis://reporter:reporter-pw-0123456789@127.0.0.1:{redis_server.port}/0"
    )
    forged = b'{"v":1,"instance":"x","seq":1,"ts":1,"hot":[],"cool":[]}'
    with admin.pubsub() as sub:
        sub.subscribe(f"{P}:demand:d1")
        assert wait_until(lambda: admin.pubsub_numsub(f"{P}:demand:d1")[0][1] == 1)
        assert rep.publish(f"{P}:demand:d1", b"{}") == 1  # delivered
    assert _noperm(lambda: rep.publish(f"{P}:events", forged))
    assert _noperm(lambda: rep.publish(f"{P}:invalidate", b"{}"))
    assert _noperm(lambda: rep.publish("other:demand:d1", b"{}"))
    assert _noperm(lambda: rep.get("app:item"))
    assert _noperm(lambda: rep.set(f"{{{P}}}:snapshot:x", forged))
    assert _noperm(lambda: rep.execute_command("SUBSCRIBE", f"{P}:demand:d1"))
    rep.close()
    admin.close()
