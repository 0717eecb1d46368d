"""Pub/sub delivery latency on a Redis Cluster: on the publishing node vs across the bus.

A plain PUBLISH reaches subscribers on other nodes over the cluster bus. Redis 7.0 sets
``TCP_NODELAY`` only on the cluster-bus links it accepts, not on those it opens, so under
a steady message rate Nagle's algorithm and the receiver's delayed ACK hold a message
back (up to ~40 ms on Linux). This is why every hotkeyd party meets on one node (the
slot owner of ``<prefix>:invalidate``, ``hotkeyd.conn.cluster.pubsub_node``).

One subscriber per node of a 3-primary cluster with one replica each; one publisher on
the first node sends timestamped messages at ``--rate``/s (exponential gaps), plus
unrelated traffic from a second node; per node, p50/p99/p99.9/max of publish -> receive.

    python benchmarks/bench_cluster_bus_latency.py [--seconds 30] [--rate 60]
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from hotkeyd.testing import RedisClusterServers


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=60.0, help="messages/s")
    a = ap.parse_args()
    with RedisClusterServers(primaries=3, replicas=1, node_timeout=5000) as c:
        ports = c.ports
        lat: dict[int, list[float]] = {p: [] for p in ports}
        stop = threading.Event()

        def sub(port: int) -> None:
            ps = redis.Redis(port=port).pubsub()
            ps.subscribe("lat")
            while not stop.is_set():
                m = ps.get_message(timeout=0.5)
                if m and m["type"] == "message":
                    lat[port].append((time.monotonic_ns() - int(m["data"])) / 1e6)
            ps.close()

        threads = [threading.Thread(target=sub, args=(p,), daemon=True) for p in ports]
        for t in threads:
            t.start()
        time.sleep(2)
        for v in lat.values():
            v.clear()
        pub, other = redis.Redis(port=ports[0]), redis.Redis(port=ports[1])
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            pub.publish("lat", str(time.monotonic_ns()))
            if random.random() < 0.5:
                other.publish("other", "x" * 200)
            time.sleep(random.expovariate(a.rate))
        stop.set()
        for t in threads:
            t.join(2)
        print(f"PUBLISH on node {ports[0]} at ~{a.rate:g}/s for {a.seconds:g} s; "
              f"delivery latency per subscriber's node, ms")  # fmt: skip
        print("| node | n | p50 | p99 | p99.9 | max |\n|---|---|---|---|---|---|")
        for p in ports:
            xs = lat[p]
            where = "publishing node" if p == ports[0] else "other node"
            print(f"| {p} ({where}) | {len(xs)} | {_pct(xs, 0.5):.2f} | {_pct(xs, 0.99):.2f} | "
                  f"{_pct(xs, 0.999):.2f} | {max(xs, default=0):.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
