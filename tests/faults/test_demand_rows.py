"""Issue 23's table, rows of the demand path: each starts ``hotkeyd run`` (MONITOR tap)
and redis-server, produces the row's input at the stated rate (asserted from Redis'
``INFO commandstats``) and checks that the loop stays closed: a key whose only demand
is reported by an app (1,200/s, threshold 1,000) stays hot in >= 99 % of one-second
samples. ``HOTKEYD_SOAK_SECONDS`` (``make test-long``: 60) lengthens the sampling."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from tests.client.helpers import wait_until

pytestmark = [pytest.mark.integration]

KEY = b"product:1"
SECONDS = float(os.environ.get("HOTKEYD_SOAK_SECONDS", "6"))
REPORTER_KEY = b"reporter-key-for-tests-0123"
RULES = "[default]\nthreshold = 1000\nttl = 2.0\ncooldown = 1.0\n"


def publishes(r: redis.Redis) -> int:
    stats = r.info("commandstats").get("cmdstat_publish", {})
    return int(stats.get("calls", 0))


@contextmanager
def every(period: float, action: Callable[[int], object]) -> Iterator[list[int]]:
    """Run ``action(i)`` every ``period`` s (0: back to back) in a thread; yields [count]."""
    stop, done = threading.Event(), [0]

    def run() -> None:
        nxt = time.monotonic()
        while not stop.is_set():
            action(done[0])
            done[0] += 1
            nxt += period
            if period:
                stop.wait(max(0.0, nxt - time.monotonic()))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield done
    finally:
        stop.set()
        t.join(5)


def hot_fraction(daemon: DaemonProcess, seconds: float) -> float:
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(any(e["key"] == KEY.decode() for e in daemon.topk()["hot"]))
        time.sleep(1.0)
    return sum(samples) / len(samples)


def scenario(
    redis_server: RedisServer,
    tmp_path: Path,
    attack: Callable[[redis.Redis, str], object],
    attack_period: float,
    *,
    signed: bool,
) -> tuple[DaemonProcess, float, int, float]:
    """The daemon, the key made hot then kept hot by reported demand only, under attack."""
    ns = Namespace(f"rows{os.getpid()}")
    (tmp_path / "rules.toml").write_text(RULES)
    args = ["-s", f"redis-monitor://127.0.0.1:{redis_server.port}", "--redis-url"]
    args += [redis_server.url, "--namespace", ns.prefix, "--instance", "d1"]
    args += ["--rules", str(tmp_path / "rules.toml"), "--window", "1.0"]
    if signed:
        (tmp_path / "demand.key").write_bytes(REPORTER_KEY + b"\n")
        args += ["--demand-key-file", str(tmp_path / "demand.key")]
    auth = MessageAuth([REPORTER_KEY]) if signed else None
    daemon = DaemonProcess(*args, stdin=False, capture=False, log_level="warning")
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, b"v")
    channel = ns.demand_channel("d1")

    def real_demand(i: int) -> None:  # an app serving 1,200 reads/s of KEY from its cache
        report = DemandReport("app-1", i + 1, time.time(), 250, (DemandEntry(KEY, 300),))
        data = report.dumps()
        r.publish(channel, auth.sign(data) if auth else data)

    def reads(_: int) -> None:  # what reaches Redis before the key is hot: 2,000 GETs/s
        pipe = r.pipeline(transaction=False)
        for _ in range(200):
            pipe.get(KEY)
        pipe.execute()

    daemon.start()
    try:
        assert wait_until(lambda: r.pubsub_numsub(channel)[0][1] == 1, timeout=20)
        with every(0.25, real_demand):
            with every(0.1, reads):
                assert wait_until(
                    lambda: any(e["key"] == KEY.decode() for e in daemon.topk()["hot"]),
                    timeout=15,
                ), "the key never turned hot"
            time.sleep(1.5)  # only the reports keep it hot from here on
            before, t0 = publishes(r), time.monotonic()
            with every(attack_period, lambda i: attack(r, channel)):
                frac = hot_fraction(daemon, SECONDS)
            rate = (publishes(r) - before) / (time.monotonic() - t0)
        return daemon, frac, int(rate), SECONDS
    except BaseException:
        daemon.stop()
        raise


POISON = (
    b'{"v":1,"type":"demand","app":"x","seq":1,"ts":'
    + b"1" * 400
    + b',"interval_ms":250,"entries":[]}'
)


def test_a_poison_report_every_50_ms_is_counted_and_the_key_stays_hot(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    daemon, frac, rate, _ = scenario(
        redis_server, tmp_path, lambda r, ch: r.publish(ch, POISON), 0.05, signed=False
    )
    try:
        assert rate >= 0.8 * (20 + 4), rate  # 20 poison + 4 real reports per second
        assert frac >= 0.99, f"hot in {frac:.0%} of the samples"
        assert daemon.metric("hotkeyd_demand_reports_dropped_total", reason="malformed") > 0
        lost = daemon.metric("hotkeyd_demand_reports_dropped_total", reason="subscription_lost")
        assert lost == 0
        assert daemon.health() == "degraded"  # the drops show
    finally:
        daemon.stop()


FLOOD = b'{"v":1,"type":"demand","app":"f","pad":"' + b"x" * (100 << 10) + b'"}'


def test_an_unsigned_flood_costs_no_real_demand_when_signing_is_required(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    daemon, frac, rate, _ = scenario(
        redis_server, tmp_path, lambda r, ch: r.publish(ch, FLOOD), 0.0, signed=True
    )
    try:
        assert rate >= 20, rate  # >= 2 MB/s of unsigned 100 KiB reports (one publisher)
        assert frac >= 0.99, f"hot in {frac:.0%} of the samples"
        assert daemon.metric("hotkeyd_demand_reports_dropped_total", reason="unsigned") > 0
        assert daemon.metric("hotkeyd_demand_reports_dropped_total", reason="malformed") == 0
        assert daemon.health() == "degraded"
    finally:
        daemon.stop()
