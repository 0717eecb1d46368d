"""End to end with the real daemon: the app reports its accesses to ``hotkeyd run``.

The app's reads go through HotCache and each access is also written as a key line to
the daemon's stdin. Once the daemon finds the key hot, Redis GETs for it collapse;
after the app stops hammering it, the daemon cools it and GETs go back to Redis.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisServer
from hotkeyd.wire import Namespace

from .helpers import get_calls, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RULES = """
[default]
threshold = 200
ttl = 2.0
cooldown = 0.3
"""


def test_real_daemon_load_collapses_and_returns(
    redis_server: RedisServer, ns: Namespace, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "run",
            "-s",
            "-",
            "--redis-url",
            redis_server.url,
            "--namespace",
            ns.prefix,
            "--rules",
            str(rules),
            "--no-http",
            "--log-level",
            "warning",
        ],
        stdin=subprocess.PIPE,
    )
    assert proc.stdin is not None
    r = redis.Redis.from_url(redis_server.url)
    r.set("item:hot", b"v")
    cache = HotCache(redis.Redis.from_url(redis_server.url), namespace=ns)
    try:
        assert wait_until(lambda: r.zcard(ns.instances) >= 1, timeout=20)  # daemon up
        cache.start()

        def access(n: int, rate: float) -> int:
            """n reads of item:hot at ~rate/s, each reported to the daemon; Redis GETs."""
            before = get_calls(r)
            for i in range(n):
                assert cache.get("item:hot") == b"v"
                proc.stdin.write(b"item:hot\n")  # type: ignore[union-attr]
                if i % 20 == 19:
                    proc.stdin.flush()  # type: ignore[union-attr]
                    time.sleep(20 / rate)
            proc.stdin.flush()  # type: ignore[union-attr]
            return get_calls(r) - before

        cold = access(100, 1000.0)
        assert cold == 100
        deadline = time.monotonic() + 20
        while b"item:hot" not in cache.hotset and time.monotonic() < deadline:
            access(100, 1000.0)
        assert b"item:hot" in cache.hotset, "the daemon never reported item:hot hot"
        hot = access(1000, 1000.0)
        assert hot <= 100, f"{hot} Redis GETs for 1000 reads while hot"
        # Stop hammering: the daemon cools the key (or its TTL runs out).
        assert wait_until(lambda: b"item:hot" not in cache.hotset, timeout=20)
        after = access(50, 50.0)
        assert after == 50
    finally:
        cache.close()
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(10)
