"""Daemon benchmarks (issue 3): detection latency, pipeline throughput, false alarms.

    python benchmarks/bench_daemon.py                 # all three, defaults below
    python benchmarks/bench_daemon.py --only latency --bursts 100
    python benchmarks/bench_daemon.py --only latency --background 1000000 --random-phase \\
        --baseline ../main      # 1M keys/s of uniform background, beside main's build
    python benchmarks/bench_daemon.py --only latency --background 1000000 --random-phase \\
        --bursts 20 --latency-repeats 4 --baseline ../main   # interleaved, CPU ratios
    python benchmarks/bench_daemon.py --only idle --idle-repeats 5 --baseline ../main
    python benchmarks/bench_daemon.py --only throughput --events 10000000 --repeats 3
    python benchmarks/bench_daemon.py --only false-alarms --seconds 60

Detection latency: a real ``hotkeyd run`` subprocess reads stdin and publishes to a
real redis-server. A writer thread streams uniform background traffic and, one after
another, bursts of fresh keys at 10x the threshold; a subscriber stamps each hot
message. Latency = subscriber receive time - time the burst's first line was written.

Pipeline throughput: a file of Zipf key lines goes through the whole service in this
process (stream source -> detector with its ring of sketches -> publisher), compared
with the raw sketch ``update_lines`` rate on the same bytes in the same run.

False alarms: a steady Zipf stream whose busiest key sits at half the threshold runs
through the service in real time; any hot event is a false alarm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zipf import zipf_lines

from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.service import Service
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.protocol.wire import Message
from hotkeyd.publish import MemoryPublisher
from hotkeyd.sketch import IMPLEMENTATION, HeavyKeeper
from hotkeyd.sources.stream import StreamSource
from hotkeyd.sources.synthetic import SyntheticSource
from hotkeyd.testing import RedisServer, free_port


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


# --------------------------------------------------------------------------- latency
def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _publish_p99_ms(port: int) -> float:
    """p99 (bucket upper bound) of hotkeyd_detector_publish_latency_seconds; nan if absent."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return float("nan")
    buckets = []
    for line in text.splitlines():
        if line.startswith("hotkeyd_detector_publish_latency_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    total = buckets[-1][1]
    return next(le for le, n in buckets if n >= 0.99 * total) * 1000


def _daemon(
    build: str | None, rs_url: str, channel: str, rules: Path, port: int | None = None
) -> subprocess.Popen:
    """``hotkeyd run`` reading stdin; ``build``: a checkout (built in place) to run instead."""
    env = dict(os.environ)
    if build:
        env["PYTHONPATH"] = build + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "hotkeyd", "run", "--redis-url", rs_url, "--channel", channel]
    port = port or free_port()
    cmd += ["--rules", str(rules), "--http-port", str(port), "--log-level", "WARNING"]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, env=env, cwd=build or None)


_THREAD_NAMES = """
import json, os, sys, threading
_path = sys.argv.pop(1)
def _dump():
    # Sleeps in open() on a FIFO until the benchmark asks (it writes a byte), so it
    # adds no wake-ups to the daemon it measures; each ask writes every live thread's
    # name and the ask's number.
    n = 0
    while True:
        with open(_path + ".ask", "rb") as f:
            f.read(1)
        n += 1
        names = {t.native_id: t.name for t in threading.enumerate()}
        with open(_path + ".tmp", "w") as f:
            f.write(json.dumps({"ask": n, "names": names}))
        os.replace(_path + ".tmp", _path)
threading.Thread(target=_dump, name="bench-thread-names", daemon=True).start()
from hotkeyd.cli import main
sys.argv[0] = "hotkeyd"
main()
"""
"""``hotkeyd``'s CLI, plus a thread that writes the daemon's thread names to a file when
asked through a FIFO, so the idle CPU can be broken down by thread (the OS sees every
Python thread as ``python``). That thread is the benchmark's, not the daemon's: it is
left out of the figures (it sleeps in ``open()`` while the daemon is measured)."""


def _ask_thread_names(path: Path, ask: int, timeout: float = 10.0) -> dict[int, str]:
    """The daemon's thread names, by native id (the ``ask``-th request)."""
    with open(str(path) + ".ask", "wb") as f:
        f.write(b"x")
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):
            got = json.loads(path.read_text())
            if got["ask"] >= ask:
                return {int(k): v for k, v in got["names"].items()}
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon did not report its thread names")
        time.sleep(0.05)


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of ``pid`` (schedstat: nanoseconds, not 10 ms ticks)."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return {k: v / 1e9 for k, v in out.items()}


def _wait_healthy(port: int, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not come up within {timeout:g} s")
        time.sleep(0.1)


def _thread_group(name: str) -> str:
    if name.startswith("hotkeyd-watch-") and name != "hotkeyd-watch-topology":
        return "watch"
    return "main loop" if name == "MainThread" else "other"


def bench_idle(
    build: str | None, seconds: float, *, redis: bool = True
) -> tuple[float, dict[str, float]]:
    """Share of one core a daemon with no input uses (stdin open, nothing written), and
    that share by thread group (the watch's threads, the main loop, the rest).

    ``redis``: publish to a real redis-server (the default setup: publisher heartbeats
    and the watch with its 100 ms heartbeats); without it the daemon writes to stdout.
    """
    tmp = Path(tempfile.mkdtemp())
    rules = tmp / "rules.toml"
    rules.write_text("[default]\nthreshold = 1000\nttl = 1.0\ncooldown = 0.5\n")
    env = dict(os.environ)
    if build:
        env["PYTHONPATH"] = build + os.pathsep + env.get("PYTHONPATH", "")
    os.mkfifo(tmp / "threads.json.ask")
    cmd = [sys.executable, "-c", _THREAD_NAMES, str(tmp / "threads.json"), "run"]
    port = free_port()
    cmd += ["--rules", str(rules), "--http-port", str(port), "--log-level", "WARNING"]
    with contextlib.ExitStack() as stack:
        if redis:
            rs = stack.enter_context(RedisServer())
            cmd += ["--redis-url", rs.url, "--channel", "bench:idle"]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=build or None
        )
        try:
            _wait_healthy(port)  # start-up (slow on a loaded box) is not idle time
            time.sleep(1.0)
            c0, t0 = _thread_cpu(proc.pid), time.monotonic()
            time.sleep(seconds)
            c1, elapsed = _thread_cpu(proc.pid), time.monotonic() - t0
            names = _ask_thread_names(tmp / "threads.json", 1)
        finally:
            proc.terminate()
            proc.wait(20)
    groups = {"watch": 0.0, "main loop": 0.0, "other": 0.0}
    for tid, cpu in c1.items():
        if names.get(tid) == "bench-thread-names":
            continue
        groups[_thread_group(names.get(tid, ""))] += (cpu - c0.get(tid, 0.0)) / elapsed
    return sum(groups.values()), groups


def bench_latency(
    bursts: int,
    threshold: float,
    burst_ms: float,
    *,
    background: float = 0.0,
    bg_keys: int = 1_000_000,
    random_phase: bool = False,
    build: str | None = None,
    seed: int = 1,
    key_len: int = 0,
) -> dict[str, float]:
    """Bursts of fresh keys at 10x threshold through stdin; first line -> hot message.

    ``background``: lines/s of uniform traffic over ``bg_keys`` keys all along (0: the old
    20k/s over 2,000 keys). ``random_phase``: each burst starts at a uniformly random
    point of the 100 ms tick (the writer waits a random 0-100 ms before it).
    """
    rules = Path(tempfile.mkdtemp()) / "rules.toml"
    rules.write_text(f"[default]\nthreshold = {threshold}\nttl = 1.0\ncooldown = 0.5\n")
    rng = random.Random(seed)
    step = 0.002 if background else 0.01
    if background:
        per_step = max(1, round(background * step))
        pool = [
            (b"bg:%d:" % rng.randrange(bg_keys)).ljust(key_len, b"x")
            for _ in range(min(2_000_000, bg_keys * 2))
        ]
        background_lines = b"\n".join(pool) + b"\n"
        offsets = [0]
        for k in pool:
            offsets.append(offsets[-1] + len(k) + 1)
    else:
        per_step = 200
        pool = [b"bg:%d" % i for i in range(2000)]  # 20k/s spread: 10/s per key
        background_lines = b"\n".join(pool) + b"\n"
        offsets = [0]
        for k in pool:
            offsets.append(offsets[-1] + len(k) + 1)
    with RedisServer() as rs:
        channel = "bench:events"
        r = redis.Redis.from_url(rs.url)
        ps = r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(channel)
        received: dict[bytes, float] = {}
        stop = threading.Event()

        def listen() -> None:
            while len(received) < bursts:
                m = ps.get_message(timeout=0.5)
                if m and m["type"] == "message":
                    now = time.monotonic()
                    for h in Message.loads(m["data"]).hot:
                        received.setdefault(h.key, now)
                elif stop.is_set():
                    return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        port = free_port()
        proc = _daemon(build, rs.url, channel, rules, port)
        assert proc.stdin is not None
        stdin = proc.stdin
        time.sleep(1.5)
        sent: dict[bytes, float] = {}
        burst_rate = threshold * 10
        pos = written = 0
        npool = len(pool)

        def bg_chunk(n: int) -> bytes:
            nonlocal pos, written
            written += n
            end = pos + n
            if end <= npool:
                out = background_lines[offsets[pos] : offsets[end]]
            else:
                out = background_lines[offsets[pos] :] + background_lines[: offsets[end - npool]]
            pos = end % npool
            return out

        def run_for(seconds: float, key: bytes | None) -> None:
            """Write background (and ``key`` at 10x threshold) for ``seconds``, paced."""
            start = time.monotonic()
            done_bg = done_key = 0
            while True:
                now = time.monotonic()
                el = now - start
                if el >= seconds:
                    return
                want_bg = (
                    round((el + step) * background)
                    if background
                    else round((el + step) / step * per_step)
                )
                lines = bg_chunk(max(0, want_bg - done_bg))
                done_bg = max(done_bg, want_bg)
                if key is not None:
                    want_key = max(1, round((el + step) * burst_rate))
                    lines += (key + b"\n") * (want_key - done_key)
                    if done_key == 0:
                        sent[key] = time.monotonic()
                    done_key = want_key
                stdin.write(lines)
                stdin.flush()
                time.sleep(max(0.0, step - (time.monotonic() - now)))

        c0 = _cpu_seconds(proc.pid)
        t0 = time.monotonic()
        try:
            run_for(1.0, None)
            for b in range(bursts):
                if random_phase:
                    run_for(rng.uniform(0.0, 0.1), None)
                run_for(burst_ms / 1000, (b"burst:%d:" % b).ljust(key_len, b"x"))
                run_for(0.2, None)  # then 200 ms of background only
            took = time.monotonic() - t0
            cpu = (_cpu_seconds(proc.pid) - c0) / took
            bg_rate = written / took
            run_for(1.0, None)
            publish_p99 = _publish_p99_ms(port)
        finally:
            stop.set()
            proc.terminate()
            proc.wait(20)
            listener.join(5)
    lat = [(received[k] - t) * 1000 for k, t in sent.items() if k in received]
    missed = len(sent) - len(lat)
    return {
        "bursts": len(sent),
        "missed": missed,
        "p50_ms": pct(lat, 50) if lat else float("nan"),
        "p90_ms": pct(lat, 90) if lat else float("nan"),
        "p99_ms": pct(lat, 99) if lat else float("nan"),
        "max_ms": max(lat) if lat else float("nan"),
        "cpu": cpu,
        "bg_rate": bg_rate,
        "publish_p99_ms": publish_p99,
    }


# ------------------------------------------------------------------------ throughput
def bench_throughput(events: int, repeats: int, alpha: float) -> dict[str, float]:
    data = zipf_lines(events, 1_000_000, alpha, seed=7)
    path = Path(tempfile.mkdtemp()) / "keys.txt"
    path.write_bytes(data)
    settings = Settings(sources=(str(path),), http_port=None)
    svc_rates, raw_rates = [], []
    chunk = 1 << 20
    for _ in range(repeats):
        # Raw sketch, same bytes, same 1 MiB chunks cut at newlines, one sub-window's size.
        sk = HeavyKeeper(k=settings.k, memory=settings.memory // 11, seed=0)
        t0 = time.perf_counter()
        pos = 0
        while pos < len(data):
            end = data.rfind(b"\n", pos, pos + chunk) + 1 or len(data)
            sk.update_lines(memoryview(data)[pos:end])
            pos = end
        raw_rates.append(events / (time.perf_counter() - t0))

        pub = MemoryPublisher(instance="bench")
        svc = Service(
            settings, publisher=pub, sources=[StreamSource(str(path), metrics=None or _metrics())]
        )
        t0 = time.perf_counter()
        svc.run()
        svc_rates.append(events / (time.perf_counter() - t0))
    svc_m, raw_m = statistics.median(svc_rates), statistics.median(raw_rates)
    return {
        "events": events,
        "service_per_s": svc_m,
        "raw_update_lines_per_s": raw_m,
        "ratio": svc_m / raw_m,
    }


def _metrics():  # type: ignore[no-untyped-def]
    from hotkeyd.metrics import Metrics

    return Metrics()


# ---------------------------------------------------------------------- false alarms
def bench_false_alarms(seconds: float, rate: float, threshold_factor: float) -> dict[str, float]:
    probe = SyntheticSource(rate=rate, universe=100_000, alpha=1.0)
    top_rate = float(probe._cdf[0]) * rate
    threshold = top_rate * threshold_factor
    pub = MemoryPublisher(instance="bench")
    src = SyntheticSource(rate=rate, universe=100_000, alpha=1.0, duration=seconds, seed=3)
    rules = RuleSet(default=Rule("default", threshold=threshold, ttl=2.0, cooldown=2.0))
    svc = Service(Settings(http_port=None), publisher=pub, sources=[src], rules=rules)
    svc.run()
    hot = [h.key for m in pub.messages for h in m.hot if not m.final]
    return {
        "seconds": seconds,
        "events": src.events,
        "threshold": threshold,
        "top_key_rate": top_rate,
        "hot_events": len(hot),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", choices=["latency", "idle", "throughput", "false-alarms"])
    ap.add_argument("--bursts", type=int, default=100)
    ap.add_argument("--threshold", type=float, default=1000.0)
    ap.add_argument("--burst-ms", type=float, default=300.0)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=100_000.0)
    ap.add_argument(
        "--background",
        type=float,
        default=0.0,
        help="latency: lines/s of uniform background over --bg-keys keys (e.g. 1000000)",
    )
    ap.add_argument("--bg-keys", type=int, default=1_000_000)
    ap.add_argument("--key-len", type=int, default=0, help="latency: pad keys to this many bytes")
    ap.add_argument(
        "--random-phase",
        action="store_true",
        help="latency: each burst starts at a uniformly random phase of the 100 ms tick",
    )
    ap.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="latency/idle: also run the daemon of this checkout (built in place, e.g. a "
        "worktree of main), interleaved, and print both side by side",
    )
    ap.add_argument(
        "--latency-repeats",
        type=int,
        default=1,
        help="latency: runs per build, interleaved (with --baseline: CPU ratio per repeat)",
    )
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--idle-repeats", type=int, default=3, help="idle: interleaved rounds")
    args = ap.parse_args()
    print(f"# hotkeyd daemon benchmarks (sketch: {IMPLEMENTATION}, cpus: {os.cpu_count()})\n")
    builds = [("this build", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    if args.only in (None, "latency"):
        shape = (
            f"background {args.background:,.0f}/s uniform over {args.bg_keys:,} keys"
            if args.background
            else "background 20k/s over 2,000 keys"
        )
        phase = ", random phase" if args.random_phase else ""
        phase += f", keys of {args.key_len} bytes" if args.key_len else ""
        print(
            "## Detection latency (first event at 10x threshold -> hot message on the Redis "
            f"channel; {shape}{phase})\n"
        )
        print(
            "| build | bursts | missed | p50 | p90 | p99 | max | daemon CPU "
            "| background written | close-to-publish p99 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        cpus: dict[str, list[float]] = {name: [] for name, _ in builds}
        for rep in range(args.latency_repeats):
            # Repeats alternate the order of the builds (the box's load drifts) and the seed.
            order = builds if rep % 2 == 0 else builds[::-1]
            for name, build in order:
                r = bench_latency(
                    args.bursts,
                    args.threshold,
                    args.burst_ms,
                    background=args.background,
                    bg_keys=args.bg_keys,
                    random_phase=args.random_phase,
                    build=build,
                    key_len=args.key_len,
                    seed=rep + 1,
                )
                cpus[name].append(r["cpu"] / max(r["bg_rate"], 1.0) * 1e6)
                print(
                    f"| {name} | {r['bursts']} | {r['missed']} | {r['p50_ms']:.0f} ms "
                    f"| {r['p90_ms']:.0f} ms | {r['p99_ms']:.0f} ms | {r['max_ms']:.0f} ms "
                    f"| {r['cpu'] * 100:.1f} % | {r['bg_rate'] / 1e6:.2f} M lines/s "
                    f"| <= {r['publish_p99_ms']:g} ms |",
                    flush=True,
                )
        print()
        if args.latency_repeats > 1 and args.baseline:
            ratios = [a / b for a, b in zip(cpus["this build"], cpus["baseline"], strict=True)]
            print(
                "Daemon CPU per M background lines, this build / baseline, per repeat: "
                + ", ".join(f"{x:.2f}" for x in ratios)
                + f"; median {statistics.median(ratios):.2f}\n"
            )
    if args.only in (None, "idle"):
        reps = args.idle_repeats
        print(f"## Idle daemon (no input, {args.idle_seconds:g} s, median of {reps} rounds)\n")
        print("| build | output | CPU (share of one core) | watch threads | main loop | other "
              "| rounds | target |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for redis in (True, False):
            runs: dict[str, list[tuple[float, dict[str, float]]]] = {n: [] for n, _ in builds}
            for rnd in range(reps):  # builds interleaved, alternating order, per setup
                for name, build in builds if rnd % 2 == 0 else builds[::-1]:
                    runs[name].append(bench_idle(build, args.idle_seconds, redis=redis))
            out = "Redis (publisher + watch)" if redis else "stdout"
            for name, _ in builds:
                tot = statistics.median(t for t, _ in runs[name])
                g = {k: statistics.median(r[1][k] for r in runs[name]) for k in runs[name][0][1]}
                rounds = ", ".join(f"{t * 100:.2f}" for t, _ in runs[name])
                print(f"| {name} | {out} | {tot * 100:.2f} % | {g['watch'] * 100:.2f} % "
                      f"| {g['main loop'] * 100:.2f} % | {g['other'] * 100:.2f} % | {rounds} "
                      f"| < 1 % |", flush=True)  # fmt: skip
        print()
    if args.only in (None, "throughput"):
        r = bench_throughput(args.events, args.repeats, args.alpha)
        print(
            f"## Pipeline throughput (file source -> detector -> publisher, {r['events']:,} Zipf({args.alpha}) keys, median of {args.repeats})\n"
        )
        print("| service | raw sketch update_lines | ratio | target |")
        print("|---|---|---|---|")
        print(
            f"| {r['service_per_s'] / 1e6:.2f} M/s | {r['raw_update_lines_per_s'] / 1e6:.2f} M/s | {r['ratio']:.2f} | >= 5 M/s |\n"
        )
    if args.only in (None, "false-alarms"):
        r = bench_false_alarms(args.seconds, args.rate, 2.0)
        print("## False alarms (steady Zipf(1.0), busiest key at half the threshold)\n")
        print("| seconds | events | busiest key | threshold | hot events | target |")
        print("|---|---|---|---|---|---|")
        print(
            f"| {r['seconds']:.0f} | {r['events']:,} | {r['top_key_rate']:,.0f}/s | {r['threshold']:,.0f}/s | {r['hot_events']} | 0 |\n"
        )


if __name__ == "__main__":
    main()
