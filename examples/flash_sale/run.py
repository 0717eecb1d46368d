"""Run the flash-sale recipe end to end and print what happened.

    python examples/flash_sale/run.py              # 20 s of load
    python examples/flash_sale/run.py --seconds 5  # shorter (what CI runs)

Starts a throwaway redis-server, the hotkeyd daemon tapping it with MONITOR, the
Starlette service under uvicorn, and the load (hot product reads; orders, every one
retried, a quarter with an injected client timeout). Then checks the invariants -
stock never oversold, no key ordered twice, every retry answered with the same bytes -
and prints a report. Then the targeted phases of ``phases.py``: a handler slower than
its lease, a holder frozen past its lease (on a second server), two users reusing one
key, and ``GET /stats``. Exit status 1 if an invariant failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import load
import phases
import redis
from app import NAMESPACE, product_json, stock_counter
from orders import Orders

from hotkeyd.testing import RedisServer, free_port, wait_for_port

HERE = Path(__file__).resolve().parent
LEASE = 1.0  # seconds: short, so the slow and frozen phases outlast it quickly


class HotReads(threading.Thread):
    """Times of ``GET product:1`` reaching Redis (a MONITOR connection of our own)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.times: list[float] = []
        self.ready = threading.Event()
        self.stop = False

    def run(self) -> None:
        with self.client.monitor() as m:
            self.ready.set()
            for cmd in m.listen():
                if self.stop:
                    return
                if cmd["command"] == "GET product:1" and cmd.get("client_type") != "lua":
                    self.times.append(time.monotonic())


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] * 1000 if len(xs) >= 2 else float("nan")


def per_second(times: list[float], start: float, seconds: int) -> list[int]:
    out = [0] * seconds
    for t in times:
        i = int(t - start)
        if 0 <= i < seconds:
            out[i] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--stock", type=int, default=1000)
    ap.add_argument("--buyers", type=int, default=8)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--timeout-rate", type=float, default=0.25)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="flash-sale-")
    db = os.path.join(tmp, "flash.db")
    procs: list[subprocess.Popen[bytes]] = []
    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)
        for i in range(1, 21):
            r.set(f"product:{i}", product_json(i))
        stock_counter(r, 1).set_total(args.stock)
        stock_counter(r, phases.PRODUCT).set_total(10)
        Orders(db)  # the schema
        try:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "hotkeyd",
                        "run",
                        "-s",
                        f"redis-monitor://127.0.0.1:{rs.port}",
                        "--redis-url",
                        rs.url,
                        "--namespace",
                        NAMESPACE.prefix,
                        "--rules",
                        str(HERE / "rules.toml"),
                        "--no-http",
                        "--log-level",
                        "warning",
                    ]
                )
            )
            env = dict(os.environ, FLASH_REDIS_URL=rs.url, FLASH_DB=db, FLASH_LEASE=str(LEASE))
            port, port2 = free_port(), free_port()
            for p in (port, port2):  # the second server: where the frozen phase retries
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "uvicorn",
                            "app:make_app",
                            "--factory",
                            "--app-dir",
                            str(HERE),
                            "--host",
                            "127.0.0.1",
                            "--port",
                            str(p),
                            "--log-level",
                            "warning",
                        ],
                        env=env,
                    )
                )
            wait_for_port(port, timeout=30)
            wait_for_port(port2, timeout=30)
            deadline = time.monotonic() + 30
            while not r.exists(NAMESPACE.instances):  # a zset or a hash, whichever the version
                if time.monotonic() > deadline:
                    raise SystemExit("the hotkeyd daemon did not register within 30 s")
                time.sleep(0.1)
            tap = HotReads(rs.url)
            tap.start()
            tap.ready.wait(5)
            start = time.monotonic()
            st = load.run(
                f"http://127.0.0.1:{port}",
                args.seconds,
                buyers=args.buyers,
                readers=args.readers,
                timeout_rate=args.timeout_rate,
            )
            tap.stop = True
            r.echo("stop")  # wakes the tap so it can end
            time.sleep(0.5)  # let orders whose client timed out finish on the server
            summary = Orders(db).summary()
            executions = [int(v) for v in r.hvals("flash:executions")]
            stock_left = stock_counter(r, 1).value()
            db_dedup = int(r.get("flash:db_dedup") or 0)
            base, base2 = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port2}"
            app_pid = procs[1].pid
            checks = {
                "slow_handler": phases.slow_handler(base, r, LEASE),
                "frozen_holder": phases.frozen_holder(base, base2, app_pid, r, db, LEASE),
                "key_reuse": phases.key_reuse(base),
                "stats": phases.stats(base),
            }
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(10)

    secs = int(args.seconds)
    hot_req = per_second(st.hot_read_times, start, secs)
    hot_redis = per_second(tap.times, start, secs)
    paid = summary["by_state"].get("PAID", {}).get("qty", 0) or 0
    after = slice(2, secs)  # from the third second on: the key is hot by then
    res = {
        "seconds": args.seconds,
        "product_1_requests": sum(hot_req),
        "product_1_redis_gets": sum(hot_redis),
        "product_1_requests_per_s": hot_req,
        "product_1_redis_gets_per_s": hot_redis,
        "steady_redis_gets_per_1000_requests": round(
            1000 * sum(hot_redis[after]) / max(1, sum(hot_req[after])), 1
        ),
        "read_p50_ms": round(pct(st.read_latency, 50), 2),
        "read_p99_ms": round(pct(st.read_latency, 99), 2),
        "orders": st.orders,
        "attempts": st.attempts,
        "retries": st.retries,
        "injected_timeouts": st.injected_timeouts,
        "conflicts_409": st.conflicts_409,
        "replays": st.replays,
        "mismatched_replays": st.mismatched_replays,
        "order_p50_ms": round(pct(st.order_latency, 50), 2),
        "order_p99_ms": round(pct(st.order_latency, 99), 2),
        "client_states": st.by_state,
        "db_orders": summary["by_state"],
        "stock": args.stock,
        "paid_qty": paid,
        "stock_left": stock_left,
        "oversold": paid > args.stock or stock_left < 0 or paid + stock_left != args.stock,
        "duplicate_orders": summary["keys_with_several_orders"],
        "handler_ran_twice": sum(1 for n in executions if n > 1),
        "db_dedup": db_dedup,
        "errors": st.errors,
        "read_errors": st.read_errors,
        "orders_abandoned": st.orders_abandoned,
        "phases": {name: seen for name, (seen, _) in checks.items()},
        "phase_failures": [b for _, bad in checks.values() for b in bad],
    }
    ok = (
        not res["oversold"]
        and res["duplicate_orders"] == 0
        and res["handler_ran_twice"] == 0
        and res["mismatched_replays"] == 0
        and res["errors"] == 0
        and st.orders > 0
        and st.retries >= st.orders
        and not res["phase_failures"]
    )
    print(
        f"flash sale: {args.seconds:g} s, {args.buyers} buyers, {args.readers} readers, stock {args.stock}"
    )
    print(f"  GET /product/1 requests per s : {hot_req}")
    print(f"  ... Redis GETs of product:1   : {hot_redis}")
    print(
        f"  steady state: {res['steady_redis_gets_per_1000_requests']} Redis GETs per 1000 requests"
    )
    print(f"  product reads p50/p99        : {res['read_p50_ms']} / {res['read_p99_ms']} ms")
    print(
        f"  orders {st.orders}: {st.attempts} attempts, {st.retries} retries, "
        f"{st.injected_timeouts} injected timeouts, {st.conflicts_409} x 409, {st.replays} replays"
    )
    print(f"  order p50/p99 (final answer) : {res['order_p50_ms']} / {res['order_p99_ms']} ms")
    print(f"  stock {args.stock}: paid {paid}, left {stock_left}, oversold: {res['oversold']}")
    print(
        f"  duplicate orders: {res['duplicate_orders']}, handler ran twice for a key: "
        f"{res['handler_ran_twice']}, retries answered with other bytes: {res['mismatched_replays']}"
    )
    print(
        f"  errors: {st.errors} (product reads not 200: {st.read_errors or 0}, orders without "
        f"a final answer: {st.orders_abandoned})"
    )
    for name, (seen, bad) in checks.items():
        print(f"  phase {name:14}: {'ok' if not bad else 'FAILED'} {seen}")
        for b in bad:
            print(f"    {b}")
    print("  OK" if ok else "  FAILED")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
