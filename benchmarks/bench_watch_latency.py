"""Direct write -> invalidation on the bus: the watch's own latency, this build vs another.

A daemon reads keys on stdin and keeps one key hot; a plain client (not the SDK) SETs
that key every ``--gap`` ms; a subscriber on ``<prefix>:invalidate`` stamps each
invalidation. The figure is the time from the SET's reply to the invalidation's
arrival: the watch reading the tracking push, re-arming the key and publishing. The
daemon's main loop can be kept busy with ``--background`` lines/s of distinct keys
(its ingest holds the GIL the watch thread needs), and the box with ``--spin`` busy
processes. Rounds alternate the builds (medians of ``--repeats`` interleaved rounds).

    python benchmarks/bench_watch_latency.py --baseline <checkout> [--writes 200]
        [--repeats 5] [--background 200000] [--spin 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess

KEY = b"item:watch-latency"


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def _feeder(d: DaemonProcess, background: float, stop: threading.Event) -> None:
    """The hot key at 3,000/s, plus ``background`` lines/s of ever-new keys."""
    step, n = 0.02, 0
    carry = 0.0
    while not stop.is_set():
        t0 = time.monotonic()
        carry += background * step
        k = int(carry)
        carry -= k
        lines = [KEY + b"\n"] * 60
        lines += [b"bg:%012d\n" % (n + i) for i in range(k)]
        n += k
        try:
            d.feed(b"".join(lines))
        except (BrokenPipeError, ValueError, OSError):
            return
        time.sleep(max(0.0, step - (time.monotonic() - t0)))


def one_round(
    build: str | None, url: str, writes: int, gap: float, background: float
) -> list[float]:
    env = {"PYTHONPATH": build} if build else None
    ps = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    ps.subscribe("hotkeyd:invalidate")
    got: list[float] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            m = ps.get_message(timeout=0.2)
            if m and KEY in m["data"]:
                got.append(time.perf_counter())

    data = redis.Redis.from_url(url)
    data.set(KEY, b"v")
    with DaemonProcess("--redis-url", url, "--window", "0.5", env=env, cwd=build) as d:
        feeder = threading.Thread(target=_feeder, args=(d, background, stop), daemon=True)
        listener = threading.Thread(target=listen, daemon=True)
        feeder.start()
        listener.start()
        try:
            deadline = time.monotonic() + 30
            while d.metric("hotkeyd_watch_keys") < 1:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the key was never armed: {d.stderr[-2000:]}")
                time.sleep(0.05)
            time.sleep(0.5)
            lat: list[float] = []
            for i in range(writes):
                time.sleep(gap)
                n = len(got)
                data.set(KEY, b"w%d" % i)
                t = time.perf_counter()
                end = t + 2.0
                while len(got) == n and time.perf_counter() < end:
                    time.sleep(0.0001)
                if len(got) > n:
                    lat.append(max(0.0, got[n] - t) * 1000)
            return lat
        finally:
            stop.set()
            feeder.join(5)
            listener.join(5)
            ps.close()
            data.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a checkout built in place (e.g. main)")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.06, help="s between writes (> re-arm spacing)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--background", type=float, default=0.0, help="lines/s of distinct keys")
    ap.add_argument("--spin", type=int, default=0, help="busy processes beside the run")
    a = ap.parse_args()
    builds = {"this build": None, "baseline": os.path.abspath(a.baseline)}
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.spin)]
    rows: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in builds}
    try:
        with RedisServer() as rs:
            for r in range(a.repeats):
                order = list(builds) if r % 2 == 0 else list(reversed(builds))
                for name in order:
                    lat = one_round(builds[name], rs.url, a.writes, a.gap, a.background)
                    row = (
                        _pct(lat, 0.5),
                        _pct(lat, 0.99),
                        max(lat, default=float("nan")),
                        len(lat),
                    )
                    rows[name].append(row)
                    print(f"round {r + 1} {name}: p50 {row[0]:.2f} ms p99 {row[1]:.2f} ms "
                          f"max {row[2]:.2f} ms ({row[3]}/{a.writes} seen)", flush=True)  # fmt: skip
    finally:
        for p in spinners:
            p.kill()
    print(f"\n## direct SET -> invalidation received ({a.writes} writes per round, background "
          f"{a.background:g} lines/s, {a.spin} spinner(s); medians of {a.repeats} interleaved rounds)\n")  # fmt: skip
    print("| build | p50 | p99 | max (median of rounds) | seen |")
    print("|---|---|---|---|---|")
    for name, rs_ in rows.items():
        med = [statistics.median(x[i] for x in rs_) for i in range(3)]
        seen = sum(x[3] for x in rs_)
        print(f"| {name} | {med[0]:.2f} ms | {med[1]:.2f} ms | {med[2]:.2f} ms | "
              f"{seen}/{a.writes * a.repeats} |")  # fmt: skip
    p99 = [statistics.median(x[1] for x in rows[n]) for n in builds]
    print(f"\np99 ratio (this build / baseline): {p99[0] / p99[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
