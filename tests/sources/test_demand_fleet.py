"""A fleet of apps against a real ``hotkeyd run``: every report sent is counted.

The fast check of ``benchmarks/bench_fleet.py``: M apps each send N reports of 100
entries (30-byte keys) at their real pace, one per 250 ms, published by the SDK's exact
bytes; the daemon must count all M x N, drop none, and stay healthy.
"""

from __future__ import annotations

import time

import redis

from hotkeyd.protocol.demand import DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from hotkeyd.testing.fleet import fleet_keys, make_fleet
from tests.client.helpers import wait_until

APPS, ROUNDS = 500, 6  # 2,000 reports/s: above what the per-message intake parsed


def test_fleet_apps_send_the_reporters_bytes() -> None:
    app = make_fleet(3, fleet_keys(300))[2]
    data = app.report(1764480000.123456)
    assert data == DemandReport(app.app, 1, 1764480000.123456, 250, app.entries).dumps()
    assert len(app.entries) == 100 and {len(e.key) for e in app.entries} == {30}


def test_every_report_of_a_fleet_is_counted(redis_server: RedisServer) -> None:
    ns = Namespace("fleet")
    channel = ns.demand_channel("d1")
    args = ["-s", "-", "--redis-url", redis_server.url, "--namespace", ns.prefix]
    with DaemonProcess(*args, "--instance", "d1", log_level="warning") as daemon:
        r = redis.Redis.from_url(redis_server.url)
        assert wait_until(lambda: r.pubsub_numsub(channel)[0][1] == 1, timeout=20)
        apps = make_fleet(APPS, fleet_keys(500))
        reached = 0
        for _ in range(ROUNDS):
            pipe = r.pipeline(transaction=False)
            now = time.time()
            for app in apps:
                pipe.publish(channel, app.report(now))
            reached += sum(pipe.execute())
            time.sleep(0.25)
        assert reached == APPS * ROUNDS
        assert wait_until(
            lambda: daemon.metric("hotkeyd_demand_reports_total") == APPS * ROUNDS, timeout=10
        ), daemon.metrics()
        assert daemon.metric("hotkeyd_demand_reports_dropped_total") == 0
        assert daemon.health() == "ok"
