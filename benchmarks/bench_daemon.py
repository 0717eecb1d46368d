"""Daemon benchmarks (issue 3): detection latency, pipeline throughput, false alarms.

    python benchmarks/bench_daemon.py                 # all three, defaults below
    python benchmarks/bench_daemon.py --only latency --bursts 100
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
import os
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
def bench_latency(bursts: int, threshold: float, burst_ms: float) -> dict[str, float]:
    rules = Path(tempfile.mkdtemp()) / "rules.toml"
    rules.write_text(f"[default]\nthreshold = {threshold}\nttl = 1.0\ncooldown = 0.5\n")
    with RedisServer() as rs:
        channel = "bench:events"
        r = redis.Redis.from_url(rs.url)
        ps = r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(channel)
        received: dict[bytes, float] = {}

        def listen() -> None:
            while len(received) < bursts:
                m = ps.get_message(timeout=0.5)
                if m and m["type"] == "message":
                    now = time.monotonic()
                    for h in Message.loads(m["data"]).hot:
                        received.setdefault(h.key, now)
                elif stop.is_set():
                    return

        stop = threading.Event()
        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hotkeyd",
                "run",
                "--redis-url",
                rs.url,
                "--channel",
                channel,
                "--rules",
                str(rules),
                "--http-port",
                str(free_port()),
                "--log-level",
                "WARNING",
            ],
            stdin=subprocess.PIPE,
        )
        assert proc.stdin is not None
        time.sleep(1.0)
        background = [b"bg:%d" % i for i in range(2000)]  # 20k/s spread: 10/s per key
        step = 0.01
        sent: dict[bytes, float] = {}
        burst_lines = int(threshold * 10 * step)
        per_burst_steps = int(burst_ms / 1000 / step)
        bg_i = 0
        try:
            for b in range(bursts):
                key = b"burst:%d" % b
                for s in range(per_burst_steps + 20):  # burst, then 200 ms of background only
                    t0 = time.monotonic()
                    chunk = background[bg_i : bg_i + 200]
                    bg_i = (bg_i + 200) % len(background)
                    lines = b"\n".join(chunk) + b"\n"
                    if s < per_burst_steps:
                        lines += (key + b"\n") * burst_lines
                        if s == 0:
                            sent[key] = time.monotonic()
                    proc.stdin.write(lines)
                    proc.stdin.flush()
                    time.sleep(max(0.0, step - (time.monotonic() - t0)))
            time.sleep(1.0)
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
        "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99),
        "max_ms": max(lat),
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
    ap.add_argument("--only", choices=["latency", "throughput", "false-alarms"])
    ap.add_argument("--bursts", type=int, default=100)
    ap.add_argument("--threshold", type=float, default=1000.0)
    ap.add_argument("--burst-ms", type=float, default=300.0)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=100_000.0)
    args = ap.parse_args()
    print(f"# hotkeyd daemon benchmarks (sketch: {IMPLEMENTATION}, cpus: {os.cpu_count()})\n")
    if args.only in (None, "latency"):
        r = bench_latency(args.bursts, args.threshold, args.burst_ms)
        print(
            "## Detection latency (first event at 10x threshold -> hot message on the Redis channel)\n"
        )
        print("| bursts | missed | p50 | p99 | max | target |")
        print("|---|---|---|---|---|---|")
        print(
            f"| {r['bursts']} | {r['missed']} | {r['p50_ms']:.0f} ms | {r['p99_ms']:.0f} ms | {r['max_ms']:.0f} ms | p99 <= 250 ms |\n"
        )
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
