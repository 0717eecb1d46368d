"""Issue 23's table, the rows of forged, replayed and oversized demand reports: each
starts ``hotkeyd run`` (MONITOR tap) and redis-server, produces the row's input at the
stated rate (asserted from Redis' ``INFO commandstats``) and checks the "must be" column
from the daemon's metrics, ``/topk`` and ``/healthz``. A few seconds each; the 60 s soaks
of the demand path are in ``test_demand_rows.py`` (``make test-long``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import MAX_N, DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from tests.client.helpers import wait_until

from .test_demand_rows import REPORTER_KEY, RULES, every, publishes

pytestmark = [pytest.mark.integration]

KEY = b"product:1"
APP_BUDGET = 20_000_000  # hotkeyd.sources.demand.DEFAULT_APP_BUDGET: reads/s of one app
PER_REPORT = 2_500_000  # the most one 250 ms report may claim of a key (10M/s, capped)


class Rig:
    """A daemon tapping one redis-server, with KEY hot from real GETs (2,000/s) while
    ``traffic`` is set; with ``monitor=False`` the accesses go to its stdin instead (so
    Redis does not copy every PUBLISH to a MONITOR client too)."""

    def __init__(
        self, redis_server: RedisServer, tmp_path: Path, *, signed: bool, monitor: bool = True
    ) -> None:
        self.ns = Namespace(f"abuse{os.getpid()}")
        self.monitor = monitor
        (tmp_path / "rules.toml").write_text(RULES)
        source = f"redis-monitor://127.0.0.1:{redis_server.port}" if monitor else "-"
        args = ["-s", source, "--redis-url"]
        args += [redis_server.url, "--namespace", self.ns.prefix, "--instance", "d1"]
        args += ["--rules", str(tmp_path / "rules.toml"), "--window", "1.0"]
        if signed:
            (tmp_path / "demand.key").write_bytes(REPORTER_KEY + b"\n")
            args += ["--demand-key-file", str(tmp_path / "demand.key")]
        self.daemon = DaemonProcess(*args, stdin=not monitor, capture=False, log_level="warning")
        self.r = redis.Redis.from_url(redis_server.url)
        self.r.set(KEY, b"v")
        self.channel = self.ns.demand_channel("d1")
        self.traffic = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._reads, daemon=True)

    def _reads(self) -> None:
        while not self._stop.wait(0.1):
            if self.traffic.is_set() and not self.monitor:
                self.daemon.feed((KEY + b"\n") * 200)
            elif self.traffic.is_set():
                pipe = self.r.pipeline(transaction=False)
                for _ in range(200):
                    pipe.get(KEY)
                pipe.execute()

    def __enter__(self) -> Rig:
        self.daemon.start()
        self._thread.start()
        assert wait_until(lambda: self.r.pubsub_numsub(self.channel)[0][1] == 1, timeout=20)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.daemon.stop()
        self.r.close()

    def rate(self) -> float:
        """KEY's rate in the daemon's hot set (0 when not hot)."""
        for e in self.daemon.topk()["hot"]:
            if e["key"] == KEY.decode():
                return float(e["rate"])
        return 0.0

    def heat(self) -> None:
        self.traffic.set()
        assert wait_until(lambda: self.rate() > 0, timeout=15), "the key never turned hot"

    def dropped(self, reason: str) -> float:
        return self.daemon.metric("hotkeyd_demand_reports_dropped_total", reason=reason)


def report(app: str, seq: int, ts: float, n: int = MAX_N) -> bytes:
    return DemandReport(app, seq, ts, 250, (DemandEntry(KEY, n),)).dumps()


def rig(
    redis_server: RedisServer, tmp_path: Path, *, signed: bool = False, monitor: bool = True
) -> Rig:
    return Rig(redis_server, tmp_path, signed=signed, monitor=monitor)


def test_forged_reports_without_traffic_are_capped_by_the_app_budget(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Row "forged reports": 40 reports/s of one app, each claiming the largest count,
    and no traffic at all. Unauthenticated, the forger can keep a hot key hot (docs say
    so), but at most at the app's budget: before, 40 reports in 1 s made it 70M/s."""
    with rig(redis_server, tmp_path) as g:
        g.heat()
        g.traffic.clear()
        time.sleep(0.5)
        before, t0, rates = publishes(g.r), time.monotonic(), []
        forge = lambda i: g.r.publish(g.channel, report("forger", i + 1, time.time(), PER_REPORT))  # noqa: E731
        with every(0.025, forge):
            for _ in range(6):
                time.sleep(0.5)
                rates.append(g.rate())
        rate = (publishes(g.r) - before) / (time.monotonic() - t0)
        assert rate >= 30, rate  # 40 forged reports per second (a few slower under load)
        print(f"forged: {rate:.0f} reports/s, key rate {rates}")
        assert rates[-1] > 0, "documented: an unauthenticated app can keep a hot key hot"
        # one second's budget may come at once, then the budget's rate (before: 70M/s)
        assert max(rates) <= 2 * APP_BUDGET, rates
        assert max(rates[2:]) <= 1.05 * APP_BUDGET, rates
        assert g.dropped("rate_limited") > 0  # 8 reports per second per app at most


def test_forged_reports_are_dropped_unparsed_when_a_reporter_key_is_required(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The same forger against a daemon with ``--demand-key-file``: its reports are
    dropped before parsing and the key cools once its real traffic ends."""
    with rig(redis_server, tmp_path, signed=True) as g:
        g.heat()
        g.traffic.clear()
        forge = lambda i: g.r.publish(g.channel, report("forger", i + 1, time.time(), PER_REPORT))  # noqa: E731
        with every(0.025, forge):
            assert wait_until(lambda: g.rate() == 0, timeout=15), "forged demand kept it hot"
            assert g.dropped("unsigned") >= 40
        accepted = g.daemon.metric("hotkeyd_demand_reports_total")
        signed = MessageAuth([REPORTER_KEY]).sign(report("app-1", 1, time.time(), 10))
        g.r.publish(g.channel, signed)
        assert wait_until(
            lambda: g.daemon.metric("hotkeyd_demand_reports_total") == accepted + 1
        ), "a signed report was not accepted"


def test_replayed_stale_future_and_backward_reports_are_dropped_and_counted(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Row "the same report again; ts 0 or year 33658; seq going backwards": each at
    40 reports/s from an app of its own, against a key hot from 2,000 GETs/s. Every one
    is counted under its reason and adds nothing (before: all accepted, 12,000/s more)."""
    now = time.time
    kinds: dict[str, tuple[Callable[[], bytes] | None, Callable[[int], bytes], str]] = {
        # (one genuine report first, the attack's i-th report, the drop reason)
        "duplicate": (
            lambda: report("dup", 1, now(), 300),
            lambda i: report("dup", 1, now(), 300),
            "duplicate",
        ),
        "ts 0": (None, lambda i: report("ts0", i + 1, 0.0, 300), "stale"),
        "year 33658": (None, lambda i: report("future", i + 1, 1.0e12, 300), "stale"),
        "seq backwards": (
            lambda: report("back", 100_000, now(), 300),
            lambda i: report("back", 100_000 - 128 * (i + 1), now(), 300),
            "duplicate",
        ),
    }
    with rig(redis_server, tmp_path) as g:
        g.heat()
        for name, (first, attack, reason) in kinds.items():
            accepted = g.daemon.metric("hotkeyd_demand_reports_total")
            dropped = g.dropped(reason)
            if first is not None:
                g.r.publish(g.channel, first())
            before, t0, rates = publishes(g.r), time.monotonic(), []
            send = lambda i, attack=attack: g.r.publish(g.channel, attack(i))  # noqa: E731
            with every(0.025, send) as sent:
                for _ in range(3):
                    time.sleep(0.4)
                    rates.append(g.rate())
            rate = (publishes(g.r) - before) / (time.monotonic() - t0)
            assert rate >= 25, (name, rate)
            n, want = sent[0], dropped + sent[0]

            def counted(r: str = reason, want: float = want) -> bool:
                return g.dropped(r) >= want

            assert wait_until(counted), (name, n)
            got = g.daemon.metric("hotkeyd_demand_reports_total") - accepted
            assert got == (first is not None), (name, got)
            assert max(rates) < 6_000, (name, rates)  # 2,000 GETs/s (+300 of the first)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


FLOOD = b'{"v":1,"type":"demand","app":"f","pad":"' + b"x" * (1 << 20) + b'"}'


def flood(r: redis.Redis, channel: str) -> None:
    pipe = r.pipeline(transaction=False)
    for _ in range(8):
        pipe.publish(channel, FLOOD)
    pipe.execute()


def test_a_1_mib_flood_without_signing_shows_and_memory_stays_bounded(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Row "a flood of 1 MiB reports" (two publishers, back to back) against a daemon
    without a reporter key: every report is dropped unparsed (``oversized``, over the
    128 KiB cap), ``/healthz`` shows it, RSS stays bounded, the intake stays subscribed
    (or subscribes again, counted) and takes real reports again (before: parsed at
    12-16/s, no counter moved, RSS 39 -> 749 MB). The accesses come on stdin: a MONITOR
    tap would make Redis copy every 1 MiB PUBLISH and cap the flood at ~20 MB/s."""
    with rig(redis_server, tmp_path, monitor=False) as g:
        g.heat()
        assert g.daemon.proc is not None
        pid = g.daemon.proc.pid
        rss0 = rss_kib(pid)
        pubs = [redis.Redis.from_url(redis_server.url) for _ in range(2)]
        before, t0, peak = publishes(g.r), time.monotonic(), rss0
        with (
            every(0.0, lambda i: flood(pubs[0], g.channel)),
            every(0.0, lambda i: flood(pubs[1], g.channel)),
        ):
            for _ in range(6):
                time.sleep(0.5)
                peak = max(peak, rss_kib(pid))
        sent = (publishes(g.r) - before) * len(FLOOD)
        mb_s = sent / (time.monotonic() - t0) / 1e6
        for p in pubs:
            p.close()
        # 400-500 MB/s on an idle 2-core machine (the review's 665 MB/s had cores to
        # spare); what must hold under any load: more than Redis' 32 MB pub/sub buffer
        assert sent >= 48 << 20, f"{sent >> 20} MiB at {mb_s:.0f} MB/s"
        assert g.dropped("oversized") > 0
        assert g.dropped("malformed") == 0  # never parsed
        assert g.daemon.health() == "degraded"
        # +3-5 MiB here since the raw reader recv()s into one buffer (before: +31-41 MiB
        # idle, +72 MiB once in CI, from a fresh 1 MiB bytes per recv)
        assert peak - rss0 < 32 << 10, f"RSS {rss0 >> 10} -> {peak >> 10} MiB"
        # Redis may cut the intake off for its output buffer (32 MB): that shows as a
        # counted loss, and the intake subscribes again
        assert wait_until(lambda: g.r.pubsub_numsub(g.channel)[0][1] == 1, timeout=10)
        print(
            f"flood {mb_s:.0f} MB/s, RSS {rss0 >> 10} -> {peak >> 10} MiB, "
            f"lost {g.dropped('subscription_lost'):.0f}"
        )
        accepted = g.daemon.metric("hotkeyd_demand_reports_total")
        seq = iter(range(1, 1000))

        def real_report_taken() -> bool:
            g.r.publish(g.channel, report("app-1", next(seq), time.time(), 10))
            return g.daemon.metric("hotkeyd_demand_reports_total") > accepted

        assert wait_until(real_report_taken, timeout=10, interval=0.3)
