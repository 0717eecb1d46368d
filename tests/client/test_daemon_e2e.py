"""End to end, wired as deployed: ``hotkeyd run`` with a MONITOR tap, app processes on HotCache.

The apps only read through the SDK. Redis' MONITOR tells the daemon what reached the
server; the SDK's demand reports tell it what the app caches served. So the key turns
hot once, stays hot while the load lasts (no flapping: issue 11), Redis serves almost
none of its reads meanwhile (measured on the server), and it cools within
cool-down + window + one report interval after the load ends.

Cost: two 30 s scenarios (sync, async) and a ~10 s bad-input one, about 85 s in all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.protocol.demand import MAX_N
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .helpers import wait_until
from .loop_harness import RULES, App, Daemon, EventWatcher, check_loop, run_loop, running

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def redis_server(any_redis_server: RedisServer) -> RedisServer:
    """Every test here runs on redis-server and on valkey-server."""
    return any_redis_server


KEY = b"product:1"
SECONDS = 30.0


def _monitor_scenario(redis_server: RedisServer, ns: Namespace, tmp_path: Path, mode: str) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, b"v")
    watcher = EventWatcher(redis_server.url, ns)
    daemon = Daemon(
        f"redis-monitor://127.0.0.1:{redis_server.port}", redis_server.url, ns, rules, "d-mon"
    )
    with running(daemon, watcher):
        assert wait_until(daemon.healthy, timeout=20), "daemon not up"
        args = ["--url", redis_server.url, "--ns", ns.prefix, "--key", KEY.decode()]
        args += ["--rate", "2000", "--cold-rate", "100", "--seconds", str(SECONDS), "--mode", mode]
        apps = [App(args, tmp_path / f"app{i}.json") for i in range(2)]
        with running(*apps):
            res = run_loop(daemon, watcher, r, apps, KEY, SECONDS)
        assert daemon.metric("hotkeyd_demand_reports_total") > 0
        assert daemon.metric("hotkeyd_demand_local_accesses_total") > 0.9 * res.app_reads
        # A report that waited past the freshness window (+-1 s) on a starved box is
        # dropped as stale, by design; any other drop, or more than 2 % stale, is a loss.
        dropped = daemon.metric("hotkeyd_demand_reports_dropped_total")
        stale = daemon.metric("hotkeyd_demand_reports_dropped_total", reason="stale")
        assert dropped == stale, f"{dropped - stale} demand reports dropped, not for age"
        assert stale <= 0.02 * daemon.metric("hotkeyd_demand_reports_total"), stale
    r.close()
    check_loop(res, KEY)
    assert not any(k.startswith(b"cold:") for _, k in res.transitions.hot)


def test_monitor_hotcache_apps_keep_the_key_hot_while_the_load_lasts(
    redis_server: RedisServer, ns: Namespace, tmp_path: Path
) -> None:
    _monitor_scenario(redis_server, ns, tmp_path, "sync")


def test_monitor_async_hotcache_apps_keep_the_key_hot(
    redis_server: RedisServer, ns: Namespace, tmp_path: Path
) -> None:
    _monitor_scenario(redis_server, ns, tmp_path, "async")


def test_bad_demand_reports_are_counted_and_never_stop_the_daemon(
    redis_server: RedisServer, ns: Namespace, tmp_path: Path
) -> None:
    """Forged, malformed, oversized and out-of-range reports on the daemon's channel."""
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, b"v")
    daemon = Daemon(
        f"redis-monitor://127.0.0.1:{redis_server.port}", redis_server.url, ns, rules, "d-bad"
    )
    channel = ns.demand_channel("d-bad")
    good = {"v": 1, "type": "demand", "app": "forger", "seq": 1, "ts": time.time(),
            "interval_ms": 250, "entries": [{"key": "never-hot", "n": 100}]}  # fmt: skip
    bad = [
        b"not json",
        b"[" * 100_000,  # deep nesting
        json.dumps({**good, "v": 9}).encode(),
        json.dumps({**good, "entries": [{"key": "x", "n": MAX_N + 1}]}).encode(),
        json.dumps({**good, "entries": [{"key": f"k{i}", "n": 1} for i in range(1001)]}).encode(),
    ]
    oversized = b'{"v":1,"pad":"' + b"x" * (1 << 20) + b'"}'  # just over 1 MiB
    with running(daemon):
        assert wait_until(daemon.healthy, timeout=20), "daemon not up"
        assert wait_until(lambda: r.pubsub_numsub(channel)[0][1] == 1, timeout=10)
        for _ in range(20):
            for payload in bad:
                r.publish(channel, payload)
        for _ in range(3):
            r.publish(channel, oversized)
        good["ts"] = time.time()  # current (a report older than 1 s is stale)
        r.publish(channel, json.dumps(good))  # well formed, but the key is not hot here
        r.publish(ns.demand_channel("someone-else"), json.dumps(good))  # nobody listens
        want = 20 * len(bad) + 3
        assert wait_until(
            lambda: daemon.metric("hotkeyd_demand_reports_dropped_total") >= want, timeout=30
        ), daemon.metric("hotkeyd_demand_reports_dropped_total")
        for reason, n in (("malformed", 40), ("version", 20), ("bad_entry", 20),
                          ("too_many_entries", 20), ("oversized", 3)):  # fmt: skip
            assert daemon.metric("hotkeyd_demand_reports_dropped_total", reason=reason) == n
        assert wait_until(
            lambda: daemon.metric("hotkeyd_demand_entries_ignored_total", reason="not_hot") == 1
        )
        assert daemon.metric("hotkeyd_demand_reports_total") == 1
        # the drops show in /healthz (degraded, not unhealthy); the loop kept ticking and
        # still detects: a plain load on the key turns it hot
        assert daemon.health() == "degraded"
        load = App(
            ["--url", redis_server.url, "--ns", ns.prefix, "--key", KEY.decode(),
             "--rate", "2000", "--seconds", "4"],
            tmp_path / "app.json",
        )  # fmt: skip
        with running(load):
            assert wait_until(lambda: any(
                e["key"] == KEY.decode() for e in daemon.topk()["hot"]
            ), timeout=15)  # fmt: skip
            load.wait(60)
        assert daemon.running
    r.close()
