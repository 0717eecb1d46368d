"""The daemon watch's cost on the data Redis (issue 25): ``redis-benchmark`` throughput
and the data Redis's own CPU per request, with and without the watch, interleaved
repeats in one run.

    python benchmarks/bench_watch.py [--repeats 5] [--requests 200000] [--pin]

The watch is the daemon's own (:class:`hotkeyd.watch.Watch`, one tracking connection,
invalidations and heartbeats published on the same server, as with the default
``--redis-url`` bus). Two workloads: ``worst``, every key ``redis-benchmark -r`` touches
is hot and armed, so every SET makes Redis push an invalidation and the watch re-arms
the key (``CLIENT CACHING yes`` + ``EXISTS``, spaced 50 ms per key) and publishes it;
``typical``, 1,000 armed hot keys among the 100,000 the benchmark touches (1 % of the
writes hit a hot key).

Three setups per round, in a rotating order so drift in the machine's load hits each:
``off`` (no watch), ``tracking`` (one RESP3 connection with ``CLIENT TRACKING on OPTIN``
and the same keys armed, but no watch thread: what Redis's tracking alone costs), and
``watch`` (the daemon's watch). For each the run reports requests per second, the data
Redis's CPU per request (``INFO cpu`` before and after, user + sys, divided by the
requests: what the watch costs *the server*, whatever else runs on the box), the SET
``usec_per_call`` of ``INFO commandstats``, and the CPU of the watch's threads in this
process. The figures are medians of the per-round ratios against ``off``.

On a 2-core box redis-server, redis-benchmark and the watch share the cores, so the
throughput ratio also counts the watch's CPU taken from redis-benchmark. ``--pin``
puts redis-server alone on CPU 0 and redis-benchmark and this process (the watch) on
CPU 1, so the watch competes with the load generator, not with the server.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from hotkeyd.watch import Watch

SETUPS = ("off", "tracking", "watch")


def bench(port: int, tests: str, n: int, keys: int, cpu: int | None) -> dict[str, float]:
    cmd = ["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(n), "-r", str(keys),
           "-c", "20", "-q"]  # fmt: skip
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    found = re.findall(r"(\w+): ([\d.]+) requests per second", out.replace("\r", "\n"))
    return {name: float(v) for name, v in found}


def metric(m: Metrics, name: str) -> float:
    total = 0.0
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == name:
                total += s.value
    return total


def server_cpu(r: redis.Redis) -> float:
    info: Any = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def set_usec(r: redis.Redis) -> tuple[int, int]:
    stats: Any = r.info("commandstats")
    s = stats.get("cmdstat_set", {"calls": 0, "usec": 0})
    return int(s["calls"]), int(s["usec"])


def thread_cpu(tids: list[int]) -> float:
    """CPU seconds of these threads of this process (ns resolution, from schedstat)."""
    total = 0
    for tid in tids:
        with suppress(FileNotFoundError):
            total += int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


@contextmanager
def setup(kind: str, url: str, armed: list[bytes]) -> Iterator[tuple[Metrics | None, list[int]]]:
    if kind == "off":
        yield None, []
        return
    if kind == "tracking":
        c = redis.Redis.from_url(url, protocol=3, single_connection_client=True)
        c.client_tracking_on(optin=True)
        conn: Any = c.connection
        cmds: list[tuple[Any, ...]] = []
        for k in armed:
            cmds += [("CLIENT", "CACHING", "YES"), ("EXISTS", k)]
        conn.send_packed_command(conn.pack_commands(cmds))
        for _ in cmds:
            conn.read_response()
        try:
            yield None, []
        finally:
            c.close()
        return
    m = Metrics()
    w = Watch([url], url, namespace=Namespace("bench"), origin="bench", auth=None, metrics=m)
    w.start()
    w.set_hot(armed)
    deadline = time.monotonic() + 30
    while metric(m, "hotkeyd_watch_keys") < len(armed):
        assert time.monotonic() < deadline, "the watch never armed the keys"
        time.sleep(0.05)
    tids = [n._thread.native_id for n in w.nodes if n._thread.native_id is not None]
    try:
        yield m, tids
    finally:
        w.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--pin", action="store_true", help="redis-server on CPU 0, the rest on 1")
    ap.add_argument("--only", choices=["worst", "typical"])
    a = ap.parse_args()
    if a.pin:
        os.sched_setaffinity(0, {1})
    for label, keys, hot in (("worst", 1000, 1000), ("typical", 100_000, 1000)):
        if a.only and label != a.only:
            continue
        print(f"{label}: redis-benchmark -t set,get -c 20 -n {a.requests} -r {keys}; "
              f"{hot} of the keys armed; {a.repeats} rounds of {', '.join(SETUPS)} "
              f"(rotating order){'; pinned' if a.pin else ''}")  # fmt: skip
        run(label, keys, hot, a.repeats, a.requests, a.pin)


def run(label: str, keys: int, hot: int, repeats: int, requests: int, pin: bool) -> None:
    with RedisServer() as rs:
        if pin and rs.proc is not None:
            os.sched_setaffinity(rs.proc.pid, {0})
        r = redis.Redis.from_url(rs.url)
        names = [b"key:%012d" % i for i in range(keys)]
        for i in range(0, keys, 10_000):
            r.mset(dict.fromkeys(names[i : i + 10_000], b"v"))
        armed = names[:: keys // hot][:hot]
        rows: dict[str, dict[str, list[float]]] = {s: {} for s in SETUPS}
        for rnd in range(repeats):
            order = SETUPS[rnd % 3 :] + SETUPS[: rnd % 3]
            for kind in order:
                with setup(kind, rs.url, armed) as (m, tids):
                    c0, s0, w0 = server_cpu(r), set_usec(r), thread_cpu(tids)
                    res = bench(rs.port, "set,get", requests, keys, 1 if pin else None)
                    c1, s1, w1 = server_cpu(r), set_usec(r), thread_cpu(tids)
                    inv = metric(m, "hotkeyd_watch_invalidations_total") if m else 0.0
                row = rows[kind]
                total = 2 * requests  # SET and GET
                row.setdefault("server_us", []).append((c1 - c0) / total * 1e6)
                row.setdefault("set_usec_per_call", []).append(
                    (s1[1] - s0[1]) / max(1, s1[0] - s0[0])
                )
                row.setdefault("watch_cpu_s", []).append(w1 - w0)
                row.setdefault("invalidations", []).append(inv)
                for name, v in res.items():
                    row.setdefault(name, []).append(v)
                print(
                    f"  round {rnd} {kind:8s}: SET {res.get('SET', 0):9.0f}/s GET "
                    f"{res.get('GET', 0):9.0f}/s  server {(c1 - c0) / total * 1e6:5.2f} us/req "
                    f" SET {row['set_usec_per_call'][-1]:5.2f} us/call  watch thread "
                    f"{w1 - w0:5.3f} s  invalidations {inv:.0f}",
                    flush=True,
                )
        r.close()
    base = rows["off"]
    for kind in SETUPS[1:]:
        for name in ("SET", "GET", "server_us", "set_usec_per_call"):
            xs = [x / b for x, b in zip(rows[kind][name], base[name], strict=True)]
            med = statistics.median(xs)
            what = "throughput" if name in ("SET", "GET") else "cost"
            print(f"  {label} {kind} {name} {what} vs off = {med:.3f} (rounds: "
                  f"{', '.join(f'{x:.3f}' for x in xs)})")  # fmt: skip
        wcpu, winv = rows[kind]["watch_cpu_s"], rows[kind]["invalidations"]
        if sum(wcpu):
            print(f"  {label} {kind} watch threads' CPU: {statistics.median(wcpu):.3f} s per "
                  f"round (median), {1e6 * sum(wcpu) / max(1.0, sum(winv)):.0f} us per "
                  f"invalidation published (heartbeats included)")  # fmt: skip


if __name__ == "__main__":
    main()
