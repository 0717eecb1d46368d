"""The daemon watch's cost on the data Redis (issue 25): ``redis-benchmark`` throughput
with and without the watch arming the benchmarked keys, interleaved repeats in one run.

    python benchmarks/bench_watch.py [--repeats 5] [--requests 200000]

The watch is the daemon's own (:class:`hotkeyd.watch.Watch`, one tracking connection,
invalidations published on the same server, as with the default ``--redis-url`` bus).
Two workloads: ``worst``, every key ``redis-benchmark -r`` touches is hot and armed, so
every SET makes Redis push an invalidation and the watch re-arms the key (``CLIENT
CACHING yes`` + ``EXISTS``, spaced 50 ms per key) and publishes it (three more commands
per write, and the watch's own CPU on the same machine); ``typical``, 1,000 armed hot
keys among the 100,000 the benchmark touches (1 % of the writes hit a hot key). Rounds
alternate the order (off/on, on/off) so drift in the machine's load hits both sides;
the figure is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time

import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from hotkeyd.watch import Watch


def bench(port: int, tests: str, n: int, keys: int) -> dict[str, float]:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(n), "-r", str(keys),
         "-c", "20", "-q"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = re.findall(r"(\w+): ([\d.]+) requests per second", out.replace("\r", "\n"))
    return {name: float(v) for name, v in found}


def metric(m: Metrics, name: str) -> float:
    total = 0.0
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == name:
                total += s.value
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200_000)
    a = ap.parse_args()
    for label, keys, hot in (("worst", 1000, 1000), ("typical", 100_000, 1000)):
        print(f"{label}: redis-benchmark -t set,get -c 20 -n {a.requests} -r {keys}; "
              f"watch: {hot} of the keys armed; {a.repeats} interleaved rounds")  # fmt: skip
        run(label, keys, hot, a.repeats, a.requests)


def run(label: str, keys: int, hot: int, repeats: int, requests: int) -> None:
    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)
        names = [b"key:%012d" % i for i in range(keys)]
        for i in range(0, keys, 10_000):
            r.mset(dict.fromkeys(names[i : i + 10_000], b"v"))
        armed = names[:: keys // hot][:hot]
        ratios: dict[str, list[float]] = {}
        for rnd in range(repeats):
            res: dict[bool, dict[str, float]] = {}
            for watch in (False, True) if rnd % 2 == 0 else (True, False):
                w = None
                m = Metrics()
                if watch:
                    w = Watch([rs.url], rs.url, namespace=Namespace("bench"), origin="bench",
                              auth=None, metrics=m).start()  # fmt: skip
                    w.set_hot(armed)
                    deadline = time.monotonic() + 30
                    while metric(m, "hotkeyd_watch_keys") < hot:
                        assert time.monotonic() < deadline, "the watch never armed the keys"
                        time.sleep(0.05)
                res[watch] = bench(rs.port, "set,get", requests, keys)
                if w is not None:
                    inv = metric(m, "hotkeyd_watch_invalidations_total")
                    w.close()
                    print(
                        f"  round {rnd} watch on : {res[watch]}  invalidations published {inv:.0f}"
                    )
                else:
                    print(f"  round {rnd} watch off: {res[watch]}")
            for name in res[False]:
                ratios.setdefault(name, []).append(res[True][name] / res[False][name])
        r.close()
    for name, xs in ratios.items():
        med = statistics.median(xs)
        print(f"  {label} {name}: with/without watch = {med:.3f} (loss {1 - med:.1%}; rounds: "
              f"{', '.join(f'{x:.3f}' for x in xs)})")  # fmt: skip


if __name__ == "__main__":
    main()
