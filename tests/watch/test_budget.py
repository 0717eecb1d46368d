"""The watch's re-arm budget (issue 25: what the watch costs the data Redis stays bounded
when many hot keys are each written many times a second). In process, a real
redis-server, writes from a plain client that does not use the SDK."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from hotkeyd.client.invalidation import decode_invalidation
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from hotkeyd.watch import MAX_REARM_SPACING, REARM_BUDGET, REARM_SPACING, Watch, rearm_spacing


def test_the_spacing_follows_the_keys_written_against_the_budget() -> None:
    assert rearm_spacing(0, 5000) == REARM_SPACING
    assert rearm_spacing(100, 5000) == REARM_SPACING  # 20 re-arms/s each: under budget
    assert rearm_spacing(1000, 5000) == pytest.approx(0.2)  # 1,000 keys x 5/s = 5,000/s
    assert rearm_spacing(10_000, 5000) == MAX_REARM_SPACING  # never past the strict lease
    assert MAX_REARM_SPACING < 0.3
    assert rearm_spacing(10_000, 0) == REARM_SPACING  # 0: no budget


def _metric(m: Metrics, name: str) -> float:
    return sum(s.value for fam in m.registry.collect() for s in fam.samples if s.name == name)


@pytest.mark.integration
def test_busy_keys_are_re_armed_within_the_budget_and_every_write_still_drops_copies() -> None:
    """40 hot keys (8 to 200 bytes) each written every ~10 ms by a plain client: without
    a budget the watch would re-arm each every 50 ms (800 re-arms/s); with a budget of
    200/s it spaces them 40 / 200 = 0.2 s apart. Each key's last write is still
    invalidated on the bus, within the spacing."""
    budget = 200
    keys = [b"bud:%02d:" % i + b"\xff" * (1 + i * 5) for i in range(40)]  # 8-203 bytes
    assert len(set(keys)) == 40 and min(map(len, keys)) == 8
    ns = Namespace("budget")
    with RedisServer() as rs:
        data = redis.Redis.from_url(rs.url)
        for k in keys:
            data.set(k, b"0")
        metrics = Metrics()
        w = Watch(
            [rs.url], rs.url, namespace=ns, origin="t", auth=None, metrics=metrics,
            rearm_budget=budget,
        ).start()  # fmt: skip
        sub = redis.Redis.from_url(rs.url).pubsub()
        sub.subscribe(ns.invalidate_channel)
        got: list[tuple[float, list[bytes]]] = []
        stop = threading.Event()

        def listen() -> None:
            while not stop.is_set():
                m: Any = sub.get_message(timeout=0.05)
                if m and m["type"] == "message":
                    got.append((time.monotonic(), decode_invalidation(m["data"])[1]))

        lt = threading.Thread(target=listen, daemon=True)
        lt.start()
        try:
            w.set_hot(keys, seq=1)
            deadline = time.monotonic() + 10
            while _metric(metrics, "hotkeyd_watch_keys") < len(keys):
                assert time.monotonic() < deadline, "keys not armed"
                time.sleep(0.02)
            last: dict[bytes, float] = {}
            writer = redis.Redis.from_url(rs.url)
            t_end = time.monotonic() + 2.5
            spacing_seen = 0.0
            n0 = t0 = None
            i = 0
            while time.monotonic() < t_end:
                i += 1
                pipe = writer.pipeline(transaction=False)
                for k in keys:
                    pipe.set(k, b"%d" % i)
                pipe.execute()
                now = time.monotonic()
                for k in keys:
                    last[k] = now
                if t0 is None and now > t_end - 1.5:  # past the ramp: measure 1.5 s
                    n0, t0 = _metric(metrics, "hotkeyd_watch_armed_total"), now
                spacing_seen = max(
                    spacing_seen, _metric(metrics, "hotkeyd_watch_rearm_spacing_seconds")
                )
                time.sleep(0.01)
            assert n0 is not None and t0 is not None
            rate = (_metric(metrics, "hotkeyd_watch_armed_total") - n0) / (time.monotonic() - t0)
            writes_per_key = i / 2.5
            assert writes_per_key > 1 / 0.2, writes_per_key  # busier than the spacing
            assert spacing_seen == pytest.approx(len(keys) / budget), spacing_seen
            # 40 keys re-armed every 0.2 s: 200/s (unbudgeted: 800/s); slack for scheduling
            assert rate < 1.5 * budget, rate
            time.sleep(MAX_REARM_SPACING + 0.5)
            stop.set()
            lt.join(2)
            for k in keys:
                after = [t for t, ks in got if k in ks and t >= last[k]]
                assert after, f"the last write of {k!r} was never invalidated"
                assert after[0] - last[k] < len(keys) / budget + 0.3, (k, after[0] - last[k])
        finally:
            stop.set()
            w.close()
            sub.close()


def test_a_negative_budget_is_a_clear_config_error() -> None:
    from hotkeyd.daemon.config import Settings
    from hotkeyd.errors import ConfigError

    with pytest.raises(ConfigError, match="watch_rearm_budget: must be >= 0"):
        Settings(watch_rearm_budget=-1)
    assert Settings(watch_rearm_budget=0).watch_rearm_budget == 0
    # the daemon's default is the watch's own (config does not import the watch)
    assert Settings().watch_rearm_budget == REARM_BUDGET


@pytest.mark.integration
def test_the_daemon_option_sets_the_budget_of_its_watch(redis_server: RedisServer) -> None:
    """``--watch-rearm-budget`` reaches the daemon's watch: two hot keys written every
    20 ms against a budget of 4 re-arms/s space their re-arms 250 ms apart (the most;
    2 / 4 = 0.5 s would pass the strict lease), where the default keeps 50 ms."""
    from hotkeyd.testing.daemon import DaemonProcess
    from tests.client.helpers import wait_until
    from tests.watch.test_watch import _Load

    keys = [b"opt:budget:1", b"opt:budget:2"]
    data = redis.Redis.from_url(redis_server.url)
    args = ("--redis-url", redis_server.url, "--window", "0.5", "--watch-rearm-budget", "4")
    with DaemonProcess(*args) as d, _Load(d, dict.fromkeys(keys, 3000.0)):
        assert wait_until(lambda: d.metric("hotkeyd_watch_keys") >= 2, timeout=10), d.stderr
        assert d.metric("hotkeyd_watch_rearm_spacing_seconds") == REARM_SPACING
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            for k in keys:
                data.set(k, b"v")
            time.sleep(0.02)
        assert d.metric("hotkeyd_watch_rearm_spacing_seconds") == MAX_REARM_SPACING, d.stderr
