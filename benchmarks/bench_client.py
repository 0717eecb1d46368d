"""Client SDK benchmark: HotCache.get vs a plain redis-py GET on loopback.

Two ratios, measured in the same run against a throwaway redis-server:

1. hot key:  plain ``redis.get`` time / ``HotCache.get`` time   (target >= 20x)
2. cold key: ``HotCache.get`` time / plain ``redis.get`` time - 1 (target <= 5 %)

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

from hotkeyd.client import HotCache
from hotkeyd.testing import RedisServer
from hotkeyd.wire import HotEntry, Message, Namespace


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
        value = b"x" * args.value_size
        plain.set("hot", value)
        plain.set("cold", value)
        # Promote "hot" the way a daemon notification would (full message of one instance).
        cache.hotset.apply(
            Message(
                instance="bench",
                seq=1,
                ts=time.time(),
                full=True,
                hot=(HotEntry(key=b"hot", rate=1e5, rule="bench", ttl_ms=3_600_000),),
            )
        )
        assert cache.get("hot") == value and cache.get("cold") == value
        for _ in range(2000):  # warm up connections, caches, branch predictors
            plain.get("cold")
            cache.get("cold")
            cache.get("hot")

        redis_hot, cache_hot = alternate(plain.get, cache.get, "hot", args.n, args.repeats)
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
    ok = res["hot_speedup_x"] >= 20 and res["cold_overhead_pct"] <= 5
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
