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

Setups per round, in a rotating order so drift in the machine's load hits each:
``off`` (no watch), ``tracking`` (one RESP3 connection with ``CLIENT TRACKING on OPTIN``
and the same keys armed, but no watch thread: what Redis's tracking alone costs),
``static`` (the same, but the keys armed are names beside the hot keys' that nothing
writes: the tracking table stays full and nothing is ever invalidated, so it is the
floor of any tracking-based watch: Redis looks every written key up in that table),
``notify`` (keyspace notifications instead of tracking: one subscription per hot key),
``watch`` (the daemon's watch, with its default re-arm budget, ``--watch-rearm-budget``
5,000/s) and ``unbudgeted`` (the same watch with no budget: each written key re-armed
every 50 ms). ``--setups`` picks some of them. For each the run reports requests per second, the data
Redis's CPU per request (``INFO cpu`` before and after, user + sys, divided by the
requests: what the watch costs *the server*, whatever else runs on the box), the SET
``usec_per_call`` of ``INFO commandstats``, and the CPU of the watch's threads in this
process. The figures are medians of the per-round ratios against ``off``.

``--paired SECONDS`` (the figures in docs/consistency.md) runs two servers side by side
on CPU 0 instead, one with the setup in each window; ``--writes PCT`` makes the load a
mix of SETs and GETs, ``--flavor`` picks the server (Redis 7.0, 8.2, Valkey 8.1, 9.1).
After each setup the keys it armed are written once more, which empties the tracking
table: Redis keeps a key there after its tracking client has gone, until it is written.

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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from hotkeyd.testing.redis import FLAVORS
from hotkeyd.watch import REARM_BUDGET, Watch

SETUPS = ("off", "tracking", "static", "notify", "watch", "unbudgeted")


def bench(
    port: int, tests: str, n: int, keys: int, cpu: int | None, pipeline: int = 1
) -> dict[str, float]:
    cmd = ["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(n), "-r", str(keys),
           "-c", "20", "-P", str(pipeline), "-q"]  # fmt: skip
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


def served(r: redis.Redis) -> tuple[int, int]:
    """The SETs and the GETs ``r``'s server has served."""
    stats: Any = r.info("commandstats")
    none = {"calls": 0}
    return int(stats.get("cmdstat_set", none)["calls"]), int(
        stats.get("cmdstat_get", none)["calls"]
    )


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
    if kind in ("tracking", "static"):
        c = redis.Redis.from_url(url, protocol=3, single_connection_client=True)
        c.client_tracking_on(optin=True)
        conn: Any = c.connection
        cmds: list[tuple[Any, ...]] = []
        # static: a name beside each hot key's that nothing writes, so the tracking table
        # stays as full as the watch keeps it, but no key is ever invalidated
        for k in [a + b"~" for a in armed] if kind == "static" else armed:
            cmds += [("CLIENT", "CACHING", "YES"), ("EXISTS", k)]
        conn.send_packed_command(conn.pack_commands(cmds))
        for _ in cmds:
            conn.read_response()
        try:
            yield None, []
        finally:
            c.close()
        return
    if kind == "notify":
        with _notified(url, armed):
            yield None, []
        return
    m = Metrics()
    w = Watch(
        [url], url, namespace=Namespace("bench"), origin="bench", auth=None, metrics=m,
        rearm_budget=0 if kind == "unbudgeted" else REARM_BUDGET,
    )  # fmt: skip
    w.start()
    w.set_hot(armed)
    deadline = time.monotonic() + 30
    while metric(m, "hotkeyd_watch_armed_total") < len(armed):  # each armed once (a load
        # of writes may be invalidating them as fast as they are armed)
        assert time.monotonic() < deadline, "the watch never armed the keys"
        time.sleep(0.05)
    tids = [n._thread.native_id for n in w.nodes if n._thread.native_id is not None]
    try:
        yield m, tids
    finally:
        w.close()


def _filled(rs: RedisServer, keys: int, hot: int, pin: bool) -> tuple[redis.Redis, list[bytes]]:
    """``keys`` keys written on ``rs`` (pinned to CPU 0 with ``pin``): a client, and the
    ``hot`` keys to arm, spread evenly over them."""
    if pin and rs.proc is not None:
        os.sched_setaffinity(rs.proc.pid, {0})
    r = redis.Redis.from_url(rs.url)
    names = [b"key:%012d" % i for i in range(keys)]
    for i in range(0, keys, 10_000):
        r.mset(dict.fromkeys(names[i : i + 10_000], b"v"))
    return r, names[:: keys // hot][:hot]


@contextmanager
def _notified(url: str, armed: list[bytes]) -> Iterator[None]:
    """The other way Redis tells of writes: keyspace notifications (``notify-keyspace-events
    K$g``, server-wide), one exact ``__keyspace@0__:<key>`` subscription per hot key, read
    and dropped by a thread. No re-arm is needed; every write of the server pays for the
    notification instead."""
    admin = redis.Redis.from_url(url)
    admin.config_set("notify-keyspace-events", "K$g")
    sub = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    for i in range(0, len(armed), 500):
        sub.subscribe(*[b"__keyspace@0__:" + k for k in armed[i : i + 500]])
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            sub.get_message(timeout=0.1)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        sub.close()
        admin.config_set("notify-keyspace-events", "")
        admin.close()


def _scrub(r: redis.Redis, armed: list[bytes]) -> None:
    """Empty the tracking table a setup left on ``r``'s server: Redis keeps a key there,
    after its tracking client has gone, until the key is written. A table left full
    would make the next rounds' "without" server pay the lookups too (the first paired
    runs measured that: a static table of 1,000 keys cost 1.3 % there, 8 % on fresh
    servers)."""
    p = r.pipeline(transaction=False)
    for k in armed:
        p.set(k, b"v")
        p.set(k + b"~", b"v")
        p.delete(k + b"~")
    p.execute()


def _set_loop(
    port: int, keys: int, pipeline: int, test: str = "set", clients: int = 20
) -> list[str]:
    """``redis-benchmark`` SETs (or ``test``) over ``keys`` keys, looping until stopped."""
    return ["redis-benchmark", "-p", str(port), "-t", test, "-n", "100000000", "-r",
            str(keys), "-c", str(clients), "-P", str(pipeline), "-l", "-q"]  # fmt: skip


def _loads(port: int, keys: int, pipeline: int, writes: int) -> list[list[str]]:
    """The load on one server: 20 connections, ``writes`` % of them looping SETs and the
    rest GETs of the same keys (a saturated server serves its connections in turn, so
    the share of SETs among the commands is close to the share of connections)."""
    setters = max(1, round(20 * writes / 100))
    loads = [_set_loop(port, keys, pipeline, "set", setters)]
    if setters < 20:
        loads.append(_set_loop(port, keys, pipeline, "get", 20 - setters))
    return loads


def alternate(
    keys: int,
    hot: int,
    rounds: int,
    window: float,
    pin: bool,
    setups: tuple[str, ...],
    pipeline: int,
) -> None:
    """One ``redis-benchmark -t set -l`` runs throughout; the setups take turns in windows
    of ``window`` seconds (rotating order), and each window counts the SETs Redis served
    (``INFO commandstats``) and its CPU, after the setup is in place. Slow drift in the
    box's speed hits every setup alike, and the medians are over many windows."""
    with RedisServer() as rs:
        r, armed = _filled(rs, keys, hot, pin)
        cmd = _set_loop(rs.port, keys, pipeline)
        if pin:
            cmd = ["taskset", "-c", "1", *cmd]
        load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows: dict[str, dict[str, list[float]]] = {s: {} for s in setups}
        try:
            time.sleep(1.0)  # the load runs
            for rnd in range(rounds):
                n = rnd % len(setups)
                for kind in setups[n:] + setups[:n]:
                    with setup(kind, rs.url, armed) as (_m, tids):
                        time.sleep(0.2)  # past the arming and the first pushes
                        t0, c0, s0, w0 = (
                            time.monotonic(),
                            server_cpu(r),
                            set_usec(r),
                            thread_cpu(tids),
                        )
                        time.sleep(window)
                        t1, c1, s1, w1 = (
                            time.monotonic(),
                            server_cpu(r),
                            set_usec(r),
                            thread_cpu(tids),
                        )
                    _scrub(r, armed)
                    sets = s1[0] - s0[0]
                    row = rows[kind]
                    row.setdefault("SET", []).append(sets / (t1 - t0))
                    row.setdefault("server_us", []).append((c1 - c0) / max(1, sets) * 1e6)
                    row.setdefault("watch_cpu", []).append((w1 - w0) / (t1 - t0))
                    print(f"  round {rnd:2d} {kind:10s}: SET {sets / (t1 - t0):9.0f}/s  server "
                          f"{(c1 - c0) / max(1, sets) * 1e6:5.2f} us/SET  watch threads "
                          f"{100 * (w1 - w0) / (t1 - t0):5.1f} % of a core", flush=True)  # fmt: skip
        finally:
            load.terminate()
            load.wait(10)
            r.close()
    for kind in setups[1:]:
        for name in ("SET", "server_us"):
            xs = [x / b for x, b in zip(rows[kind][name], rows["off"][name], strict=True)]
            what = "throughput" if name == "SET" else "cost"
            print(f"  {kind} {name} {what} vs off = {statistics.median(xs):.3f} (median of "
                  f"{len(xs)} rounds; quartiles {statistics.quantiles(xs, n=4)[0]:.3f}-"
                  f"{statistics.quantiles(xs, n=4)[2]:.3f})")  # fmt: skip
        print(f"  {kind} watch threads: {100 * statistics.median(rows[kind]['watch_cpu']):.1f} % "
              f"of a core (median)")  # fmt: skip


def paired(
    keys: int,
    hot: int,
    rounds: int,
    window: float,
    setups: tuple[str, ...],
    pipeline: int,
    writes: int = 100,
    flavor: str = "redis",
) -> None:
    """Two redis-servers share CPU 0, each saturated by its own ``redis-benchmark`` loops
    on CPU 1 (``writes`` % of the connections SET, the rest GET); in each window one of
    them has the setup (the watch), the other none, and the ratio of the commands they
    served in that window is what the setup costs Redis. Both servers see the same
    machine at the same moment, so the box's drift (its speed moved by +-30 % between
    windows here) cancels out; the servers swap roles every round. ``off`` is the
    control: neither has a watch (the pairing's own spread). This process, and so the
    watch, runs on CPU 1 with the load generators, as a daemon would on a host or core
    of its own. There its CPU can starve the load generator of the server it watches
    (that server then idles now and then: a few per cent less throughput that is the
    box's, not Redis's), so each window also gives the ratio of the commands served per
    CPU second of each server (``INFO cpu``): the work per command the watch adds to
    Redis, whatever feeds it. With the servers saturated the two agree but for that."""
    os.sched_setaffinity(0, {1})
    with RedisServer(flavor=flavor) as a, RedisServer(flavor=flavor) as b:
        servers = [a, b]
        filled = [_filled(s, keys, hot, pin=True) for s in servers]
        clients = [r for r, _ in filled]
        armed = filled[0][1]
        loads = [
            subprocess.Popen(
                ["taskset", "-c", "1", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for s in servers
            for cmd in _loads(s.port, keys, pipeline, writes)
        ]
        ratios: dict[str, list[float]] = {k: [] for k in setups}
        capacity: dict[str, list[float]] = {k: [] for k in setups}
        busy: list[float] = []
        share: list[float] = []
        try:
            time.sleep(1.0)
            for rnd in range(rounds):
                x = rnd % 2  # the server with the setup this round
                n = rnd % len(setups)
                for kind in setups[n:] + setups[:n]:
                    with setup(kind, servers[x].url, armed) as (_m, tids):
                        time.sleep(0.3)  # past the arming and the first pushes
                        t0 = time.monotonic()
                        c0 = [server_cpu(r) for r in clients]
                        s0 = [served(r) for r in clients]
                        w0 = thread_cpu(tids)
                        time.sleep(window)
                        s1 = [served(r) for r in clients]
                        c1 = [server_cpu(r) for r in clients]
                        w1, t1 = thread_cpu(tids), time.monotonic()
                    _scrub(clients[x], armed)
                    dt = t1 - t0
                    done = [(e[0] - s[0], e[1] - s[1]) for s, e in zip(s0, s1, strict=True)]
                    ops = [(st + gt) / dt for st, gt in done]
                    cpu = [(e - s) / dt for s, e in zip(c0, c1, strict=True)]
                    ratios[kind].append(ops[x] / ops[1 - x])
                    capacity[kind].append((ops[x] / cpu[x]) / (ops[1 - x] / cpu[1 - x]))
                    busy.append(sum(cpu))
                    share += [st / max(1, st + gt) for st, gt in done]
                    print(f"  round {rnd:2d} {kind:10s} on {'AB'[x]}: {ops[x]:9.0f} commands/s "
                          f"against {ops[1 - x]:9.0f}/s = {ratios[kind][-1]:.3f}  servers' CPU "
                          f"{cpu[x]:.3f} + {cpu[1 - x]:.3f}  per CPU s "
                          f"{capacity[kind][-1]:.3f}  watch threads "
                          f"{100 * (w1 - w0) / dt:4.1f} % of a core", flush=True)  # fmt: skip
        finally:
            for p in loads:
                p.terminate()
                p.wait(10)
            for r in clients:
                r.close()
    print(f"  CPU 0 busy (both servers): median {statistics.median(busy):.2f} of a core; "
          f"SETs {100 * statistics.median(share):.0f} % of the commands")  # fmt: skip
    for kind in setups:
        for what, xs in (("throughput", ratios[kind]), ("commands per CPU second", capacity[kind])):
            q = statistics.quantiles(xs, n=4)
            print(f"  {kind} {what}, with / without = {statistics.median(xs):.3f} (median "
                  f"of {len(xs)} windows; quartiles {q[0]:.3f}-{q[2]:.3f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--pin", action="store_true", help="redis-server on CPU 0, the rest on 1")
    ap.add_argument("--only", choices=["worst", "typical"])
    ap.add_argument(
        "--pipeline", type=int, default=1,
        help="redis-benchmark -P: with 8 or more the server, not the load generator, is the "
        "bottleneck on a 2-core box (the throughput ratio is then the server's capacity)",
    )  # fmt: skip
    ap.add_argument(
        "--alternate", type=float, metavar="SECONDS",
        help="one redis-benchmark -t set -l throughout, the setups taking turns in windows "
        "of SECONDS (--repeats rounds): robust to drift in the box's speed",
    )  # fmt: skip
    ap.add_argument(
        "--paired", type=float, metavar="SECONDS",
        help="two servers side by side on CPU 0, one with the setup in each window of "
        "SECONDS (--repeats rounds, roles swapped every round): the ratio cancels the "
        "box's drift",
    )  # fmt: skip
    ap.add_argument(
        "--writes", type=int, default=100, metavar="PCT",
        help="with --paired: the share of the load's connections that SET (the rest GET "
        "the same keys); 100 (default) is a write-only load",
    )  # fmt: skip
    ap.add_argument(
        "--flavor", default="redis", choices=FLAVORS,
        help="with --paired: the server (redis: Debian's Redis 7.0; redis8: Redis 8.2; "
        "valkey: Valkey 8.1; valkey9: Valkey 9.1)",
    )  # fmt: skip
    ap.add_argument("--hot", type=int, default=1000, help="hot keys armed (default 1,000)")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, 'off' first")
    a = ap.parse_args()
    setups = tuple(a.setups.split(","))
    if setups[0] != "off" or not set(setups) <= set(SETUPS):
        ap.error(f"--setups: 'off' first, then some of {', '.join(SETUPS[1:])}")
    if not 1 <= a.writes <= 100:
        ap.error("--writes: a percentage, 1 to 100")
    if a.pin:
        os.sched_setaffinity(0, {1})
    for label, keys, hot in (("worst", a.hot, a.hot), ("typical", 100_000, a.hot)):
        if a.only and label != a.only:
            continue
        if a.paired and a.writes < 100:
            setters = max(1, round(20 * a.writes / 100))
            load = (f"-t set -l -c {setters} and -t get -l -c {20 - setters} (looping) "
                    f"-P {a.pipeline} -r {keys}")  # fmt: skip
            how = f"two servers on CPU 0, windows of {a.paired} s"
        elif a.paired or a.alternate:
            load = f"-t set -l (looping) -c 20 -P {a.pipeline} -r {keys}"
            how = (f"two servers on CPU 0, windows of {a.paired} s" if a.paired
                   else f"windows of {a.alternate} s")  # fmt: skip
        else:
            load = f"-t set,get -c 20 -P {a.pipeline} -n {a.requests} -r {keys}"
            how = "one run per setup"
        if a.paired and a.flavor != "redis":
            how += f", {a.flavor} servers"
        print(f"{label}: redis-benchmark {load}; {hot} of the keys armed; {a.repeats} rounds "
              f"of {', '.join(setups)} (rotating order; {how})"
              f"{'; pinned' if a.pin or a.paired else ''}")  # fmt: skip
        if a.paired:
            paired(keys, hot, a.repeats, a.paired, setups, a.pipeline, a.writes, a.flavor)
            continue
        if a.alternate:
            alternate(keys, hot, a.repeats, a.alternate, a.pin, setups, a.pipeline)
            continue
        run(label, keys, hot, a.repeats, a.requests, a.pin, setups, a.pipeline)


def run(
    label: str,
    keys: int,
    hot: int,
    repeats: int,
    requests: int,
    pin: bool,
    setups: tuple[str, ...],
    pipeline: int = 1,
) -> None:
    with RedisServer() as rs:
        r, armed = _filled(rs, keys, hot, pin)
        rows: dict[str, dict[str, list[float]]] = {s: {} for s in setups}
        for rnd in range(repeats):
            n = rnd % len(setups)
            order = setups[n:] + setups[:n]
            for kind in order:
                with setup(kind, rs.url, armed) as (m, tids):
                    c0, s0, w0 = server_cpu(r), set_usec(r), thread_cpu(tids)
                    res = bench(rs.port, "set,get", requests, keys, 1 if pin else None, pipeline)
                    c1, s1, w1 = server_cpu(r), set_usec(r), thread_cpu(tids)
                    inv = metric(m, "hotkeyd_watch_invalidations_total") if m else 0.0
                _scrub(r, armed)
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
    for kind in setups[1:]:
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
