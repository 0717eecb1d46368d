"""Client SDK benchmark: HotCache.get vs a plain redis-py GET on loopback.

Ratios measured in the same run against a throwaway redis-server:

1. hot key:  plain ``redis.get`` time / ``HotCache.get`` time   (target >= 20x)
2. cold key: ``HotCache.get`` time / plain ``redis.get`` time - 1 (target <= 5 %)
3. demand reports: hot ``HotCache.get`` with reporting on / off - 1 (target <= 10 %),
   and the report traffic of 100 hot keys x 16 app instances (messages/s, bytes/s), with
   the daemon's cost of taking it in (validate + add to the windows).

Each figure is the median of ``--repeats`` timed batches of ``--n`` calls; the plain and
HotCache batches alternate so drift on a shared machine hits both sides equally.

    python benchmarks/bench_client.py            # full run
    python benchmarks/bench_client.py --quick    # a few seconds, for development
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from hotkeyd.batch import Batch
from hotkeyd.client import HotCache, HotSet
from hotkeyd.client.demand import DemandCounter
from hotkeyd.clock import ManualClock, SystemClock
from hotkeyd.detector import Detector, DetectorConfig
from hotkeyd.detector.rules import RuleSet
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.demand import DEFAULT_INTERVAL
from hotkeyd.protocol.wire import HotEntry, Message, Namespace
from hotkeyd.sources.demand import DemandIntake
from hotkeyd.testing import RedisServer


def per_call(fn: Callable[[Any], Any], key: str, n: int) -> float:
    """Seconds per call of ``fn(key)`` over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn(key)
    return (time.perf_counter() - t0) / n


def alternate(
    a: Callable[[Any], Any], b: Callable[[Any], Any], key: str, n: int, repeats: int
) -> tuple[float, float]:
    """Median per-call time of ``a`` and ``b``, batches interleaved."""
    ta, tb = [], []
    for i in range(repeats):
        if i % 2:
            tb.append(per_call(b, key, n))
            ta.append(per_call(a, key, n))
        else:
            ta.append(per_call(a, key, n))
            tb.append(per_call(b, key, n))
    return statistics.median(ta), statistics.median(tb)


def pair_ratio(
    a: Callable[[Any], Any], b: Callable[[Any], Any], key: str, n: int, repeats: int
) -> float:
    """Median over interleaved batch pairs of time(b) / time(a): robust to machine drift."""
    ratios = []
    for i in range(repeats):
        if i % 2:
            tb = per_call(b, key, n)
            ta = per_call(a, key, n)
        else:
            ta = per_call(a, key, n)
            tb = per_call(b, key, n)
        ratios.append(tb / ta)
    return statistics.median(ratios)


class _NullRedis:
    """Answers GET instantly: isolates what HotCache adds on the cold path."""

    def __init__(self, value: bytes) -> None:
        self.value = value

    def get(self, name: Any) -> bytes:
        return self.value


def invalidation_latency(url: str, ns: Namespace, instances: int, rounds: int) -> float:
    """Median seconds from a write returning to every other instance dropping its copy."""
    writer = HotCache(redis.Redis.from_url(url), namespace=ns).start()
    readers = [HotCache(redis.Redis.from_url(url), namespace=ns).start() for _ in range(instances)]
    promote = Message(
        instance="bench-inv",
        seq=1,
        ts=time.time(),
        full=True,
        hot=(HotEntry(key=b"inv", rate=1e5, rule="bench", ttl_ms=3_600_000),),
    )
    for c in readers:
        c.hotset.apply(promote)
    lat = []
    for i in range(rounds):
        for c in readers:
            c.get("inv")
        writer.set("inv", str(i))
        t0 = time.perf_counter()
        while any(b"inv" in c.local for c in readers):
            time.sleep(0.0001)
        lat.append(time.perf_counter() - t0)
    for c in [writer, *readers]:
        c.close()
        c.client.close()
    return statistics.median(lat)


def promote(cache: HotCache, *keys: bytes, instance: str = "bench") -> None:
    """Make ``keys`` hot the way a daemon notification would (a full message)."""
    cache.hotset.apply(
        Message(
            instance=instance,
            seq=1,
            ts=time.time(),
            full=True,
            hot=tuple(HotEntry(key=k, rate=1e5, rule="bench", ttl_ms=3_600_000) for k in keys),
        )
    )


def report_traffic(keys: int, apps: int, rounds: int) -> dict[str, float]:
    """Messages/s and bytes/s of ``apps`` instances each serving ``keys`` hot keys, and the
    daemon's CPU share to validate them and add them to its windows."""
    clock = SystemClock()
    hot = tuple(
        HotEntry(key=b"product:%06d" % i, rate=1e5, rule="bench", ttl_ms=3_600_000)
        for i in range(keys)
    )
    counters = []
    for a in range(apps):
        hs = HotSet(clock)
        hs.apply(Message(instance="daemon-1", seq=1, ts=time.time(), full=True, hot=hot))
        counters.append((hs, DemandCounter(hs, f"app-{a}-{a:08x}", Namespace(), clock)))
    # the daemon has these keys hot, as it would after announcing them
    dclock = ManualClock()
    detector = Detector(DetectorConfig(), RuleSet.default(), dclock)
    for _ in range(10):
        detector.ingest(Batch(keys=[h.key for h in hot], counts=[10_000] * keys))
        dclock.advance(0.1)
        detector.tick()
    assert len(detector.hot()) == keys
    intake = DemandIntake("redis://127.0.0.1:1", Namespace(), "daemon-1", metrics=Metrics())
    payloads: list[bytes] = []
    for r in range(rounds):
        for hs, counter in counters:
            for i, item in enumerate(hs.items.values()):
                item.served += 500 + (i * 37 + r * 11) % 5000  # 2k-22k reads/s per key
            payloads.extend(p for _, p, _ in counter.take())
    n_msgs = len(payloads)
    secs = rounds * DEFAULT_INTERVAL
    t0 = time.perf_counter()
    for p in payloads:
        intake.feed(p)
        for db, ks, cs in intake.drain():
            detector.ingest_served(ks, cs, db)
    cpu = time.perf_counter() - t0
    return {
        "messages_per_s": n_msgs / secs,
        "bytes_per_s": sum(map(len, payloads)) / secs,
        "bytes_per_message": sum(map(len, payloads)) / n_msgs,
        "daemon_cpu_pct": cpu / secs * 100,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=5000, help="calls per timed batch")
    ap.add_argument("--repeats", type=int, default=15, help="timed batches per side")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="n=1000, repeats=5")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 1000, 5

    with RedisServer() as rs:
        plain = redis.Redis.from_url(rs.url)
        cache = HotCache(redis.Redis.from_url(rs.url), namespace=Namespace(prefix="bench")).start()
        quiet = HotCache(
            redis.Redis.from_url(rs.url), namespace=Namespace(prefix="bench"), report_demand=False
        ).start()
        value = b"x" * args.value_size
        plain.set("hot", value)
        plain.set("cold", value)
        promote(cache, b"hot")
        promote(quiet, b"hot")
        assert cache.get("hot") == value and cache.get("cold") == value
        assert quiet.get("hot") == value
        for _ in range(2000):  # warm up connections, caches, branch predictors
            plain.get("cold")
            cache.get("cold")
            cache.get("hot")
            quiet.get("hot")

        redis_hot, cache_hot = alternate(plain.get, cache.get, "hot", args.n, args.repeats)
        quiet_hot, on_hot = alternate(quiet.get, cache.get, "hot", args.n * 4, args.repeats)
        demand_ratio = pair_ratio(quiet.get, cache.get, "hot", args.n * 4, args.repeats * 3)
        demand_sent = cache.demand_stats.reports if cache.demand_stats else 0
        quiet.close()
        redis_cold, cache_cold = alternate(plain.get, cache.get, "cold", args.n, args.repeats)
        cold_ratio = pair_ratio(plain.get, cache.get, "cold", args.n // 5, args.repeats * 5)
        real_client, null = cache.client, _NullRedis(value)
        cache.client = null  # type: ignore[assignment]
        n_iso = args.n * 20
        added = statistics.median(
            per_call(cache.get, "cold", n_iso) - per_call(null.get, "cold", n_iso) for _ in range(5)
        )
        cache.client = real_client
        cache.close()
        inv = invalidation_latency(rs.url, Namespace(prefix="bench"), 3, 20 if args.quick else 100)
    traffic = report_traffic(100, 16, 8 if args.quick else 40)

    res = {
        "n": args.n,
        "repeats": args.repeats,
        "value_size": args.value_size,
        "redis_get_us": round(redis_hot * 1e6, 3),
        "hotcache_hot_get_us": round(cache_hot * 1e6, 3),
        "hot_speedup_x": round(redis_hot / cache_hot, 1),
        "redis_cold_get_us": round(redis_cold * 1e6, 3),
        "hotcache_cold_get_us": round(cache_cold * 1e6, 3),
        "cold_overhead_pct": round((cold_ratio - 1) * 100, 2),
        "cold_added_ns": round(added * 1e9, 1),
        "cold_added_pct_of_rtt": round(added / redis_cold * 100, 2),
        "invalidation_3_instances_ms": round(inv * 1e3, 3),
        "hot_get_no_reports_us": round(quiet_hot * 1e6, 3),
        "hot_get_with_reports_us": round(on_hot * 1e6, 3),
        "demand_reporting_overhead_pct": round((demand_ratio - 1) * 100, 2),
        "demand_reports_sent_during_bench": demand_sent,
        "reports_100_keys_16_apps_msgs_per_s": round(traffic["messages_per_s"], 1),
        "reports_100_keys_16_apps_bytes_per_s": round(traffic["bytes_per_s"]),
        "report_bytes_per_message": round(traffic["bytes_per_message"]),
        "daemon_intake_cpu_pct": round(traffic["daemon_cpu_pct"], 2),
        "python": sys.version.split()[0],
        "redis_py": redis.__version__,
    }
    if args.json:
        print(json.dumps(res))
    else:
        print(f"n={args.n} repeats={args.repeats} value={args.value_size} B (median per call)")
        print(f"  redis-py GET (loopback)      {res['redis_get_us']:>9.2f} us")
        print(
            f"  HotCache.get, hot key        {res['hotcache_hot_get_us']:>9.2f} us"
            f"   -> {res['hot_speedup_x']}x faster (target >= 20x)"
        )
        print(f"  redis-py GET, cold key       {res['redis_cold_get_us']:>9.2f} us")
        print(
            f"  HotCache.get, cold key       {res['hotcache_cold_get_us']:>9.2f} us"
            f"   -> {res['cold_overhead_pct']:+.2f} % (median of paired batches; target <= 5 %)"
        )
        print(
            f"  cold path added cost         {res['cold_added_ns']:>9.1f} ns"
            f"   = {res['cold_added_pct_of_rtt']:.2f} % of a GET (measured against a null client)"
        )
        print(
            f"  invalidation -> 3 instances  {res['invalidation_3_instances_ms']:>9.3f} ms"
            "   (median, after the write returns; test bound 100 ms)"
        )
        print(
            f"  hot get, reports off / on    {res['hot_get_no_reports_us']:>6.2f} / "
            f"{res['hot_get_with_reports_us']:.2f} us   ratio: "
            f"{res['demand_reporting_overhead_pct']:+.2f} % "
            f"(median of paired batches; target <= 10 %; "
            f"{res['demand_reports_sent_during_bench']} reports sent meanwhile)"
        )
        print(
            f"  demand reports, 100 hot keys x 16 apps: "
            f"{res['reports_100_keys_16_apps_msgs_per_s']:.0f} msgs/s, "
            f"{res['reports_100_keys_16_apps_bytes_per_s'] / 1024:.1f} KiB/s "
            f"({res['report_bytes_per_message']} B/msg); daemon intake "
            f"{res['daemon_intake_cpu_pct']:.2f} % of a core"
        )
    ok = (
        res["hot_speedup_x"] >= 20
        and res["cold_overhead_pct"] <= 5
        and res["demand_reporting_overhead_pct"] <= 10
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
