"""Issue 23's table, the row of hostile notifications and snapshots: a real ``hotkeyd
run`` announces a key, a forger PUBLISHes a notification whose ``ts`` is a 400-digit
integer every 50 ms and leaves a snapshot with one in the registry, and the Python
client (``HotCache.from_url()``) must count both and carry on. Before, each message
restarted the subscription (``bad_messages`` 0) and every ``from_url()`` failed after
10 s with "no reply from Redis"."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.client import HotCache
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from tests.client.helpers import wait_until

from .test_demand_rows import every, publishes

pytestmark = [pytest.mark.integration]

KEY = b"product:1"
HUGE = b"1" * 400


def test_a_notification_and_a_snapshot_with_a_400_digit_ts_are_counted_and_skipped(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    ns = Namespace(f"wire{os.getpid()}")
    (tmp_path / "rules.toml").write_text("[default]\nthreshold = 1000\nttl = 5.0\n")
    args = ["-s", "-", "--redis-url", redis_server.url, "--namespace", ns.prefix]
    args += ["--instance", "d1", "--rules", str(tmp_path / "rules.toml"), "--window", "1.0"]
    daemon = DaemonProcess(*args, capture=False, log_level="warning")
    r = redis.Redis.from_url(redis_server.url)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                daemon.feed_rate({KEY: 2000.0}, seconds=0.2)
            except (BrokenPipeError, ValueError, OSError):
                return

    poison = b'{"v":1,"instance":"d1","seq":1,"ts":' + HUGE + b',"hot":[],"cool":[]}'
    snapshot = b'{"v":1,"instance":"huge","seq":1,"ts":' + HUGE + b',"full":true,"hot":[]}'
    daemon.start()
    feeder = threading.Thread(target=traffic, daemon=True)
    feeder.start()
    try:
        assert wait_until(
            lambda: any(e["key"] == KEY.decode() for e in daemon.topk()["hot"]), timeout=15
        )
        r.set(ns.snapshot("huge"), snapshot)
        r.zadd(ns.instances, {"huge": time.time()})
        before, t0 = publishes(r), time.monotonic()
        with every(0.05, lambda i: r.publish(ns.channel, poison)) as sent:
            started = time.monotonic()
            cache = HotCache.from_url(redis_server.url, namespace=ns, report_demand=False)
            try:
                took = time.monotonic() - started
                assert KEY in cache.hotset  # the real daemon's snapshot
                stats = cache.subscriber.stats
                assert stats.bad_snapshots == 1
                assert "huge" not in cache.hotset.instances()
                time.sleep(2.0)
                rate = (publishes(r) - before) / (time.monotonic() - t0)
                assert rate >= 16, rate  # 20 poison notifications per second
                assert wait_until(lambda: stats.bad_messages >= 30), stats
                assert stats.reconnects == 0 and stats.lost == 0, stats
                assert KEY in cache.hotset  # nothing was flushed
            finally:
                cache.close()
        assert took < 5.0, took
        assert sent[0] >= 40
    finally:
        stop.set()
        feeder.join(5)
        daemon.stop()
        r.close()
