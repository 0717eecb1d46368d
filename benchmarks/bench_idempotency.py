"""Idempotency guard benchmark: Redis round trips per guarded call, and its cost.

Against a throwaway redis-server on loopback, in one run:

1. round trips: a MONITOR connection records every command a client sends during
   ``--n`` guarded calls (``begin`` + the operation + ``complete``); commands run
   inside the scripts (``[0 lua]``) are not round trips and are counted apart.
   Target: 1 for begin, 1 for complete (one EVALSHA each).
2. throughput: calls/s of the bare operation (one INCR, standing for the business
   write) vs the same operation guarded, batches interleaved, medians over repeats.
   Also a floor (the operation plus two no-op scripts: the same three round trips
   doing nothing) and a replayed call (a retry answered from the stored result).

    python benchmarks/bench_idempotency.py            # full run
    python benchmarks/bench_idempotency.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable

import redis

from hotkeyd.idempotency import IdempotencyGuard, Outcome
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer


class Monitor(threading.Thread):
    """Counts the commands clients send (MONITOR), by name; script-internal ones apart."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.sent: collections.Counter[str] = collections.Counter()
        self.in_scripts = 0
        self.ready = threading.Event()

    def run(self) -> None:
        with self.client.monitor() as m:
            self.ready.set()
            for cmd in m.listen():
                name = cmd["command"].split(" ", 1)[0].upper()
                if name == "ECHO" and "bench-stop" in cmd["command"]:
                    return
                if cmd.get("client_type") == "lua":
                    self.in_scripts += 1
                else:
                    self.sent[name] += 1


def per_second(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=5000, help="calls per timed batch")
    ap.add_argument("--repeats", type=int, default=9, help="timed batches per side")
    ap.add_argument("--quick", action="store_true", help="n=1000, repeats=3")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 1000, 3

    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)
        guard = IdempotencyGuard(r, namespace=Namespace("bench"), lease=30, ttl=600)
        ids = itertools.count()
        body = b'{"sku": 42, "qty": 1}'

        def operation() -> None:
            r.incr("bench:orders")

        def guarded() -> None:
            b = guard.begin(f"order-{next(ids)}", body)
            assert b.outcome is Outcome.NEW and b.lease is not None
            operation()
            guard.complete(b.lease, b'{"order": 1}')

        noop = r.register_script("return 1")

        def floor() -> None:  # the same 3 round trips with scripts that do nothing
            noop()
            operation()
            noop()

        def replayed() -> None:
            assert guard.begin("order-0", body).outcome is Outcome.DONE

        for _ in range(500):  # warm up: connection, script cache
            guarded()
        mon = Monitor(rs.url)
        mon.start()
        mon.ready.wait(5)
        time.sleep(0.2)
        for _ in range(args.n):
            guarded()
        r.echo("bench-stop")
        mon.join(60)
        sent = dict(mon.sent)
        sent.pop("ECHO", None)
        op_cmds = sent.pop("INCRBY", 0)  # the operation itself (redis-py sends INCR as INCRBY)
        assert op_cmds == args.n, (op_cmds, sent)
        trips = sum(sent.values()) / args.n

        bare, with_guard, replay, floors = [], [], [], []
        for i in range(args.repeats):
            order = [(bare, operation), (floors, floor), (with_guard, guarded), (replay, replayed)]
            if i % 2:
                order.reverse()
            for out, fn in order:
                out.append(per_second(fn, args.n))

    res = {
        "n": args.n,
        "repeats": args.repeats,
        "guard_round_trips_per_call": round(trips, 3),
        "guard_commands": {k: v / args.n for k, v in sent.items()},
        "script_commands_per_call": round(mon.in_scripts / args.n, 2),
        "bare_calls_per_s": round(statistics.median(bare)),
        "guarded_calls_per_s": round(statistics.median(with_guard)),
        "replayed_calls_per_s": round(statistics.median(replay)),
        "floor_calls_per_s": round(statistics.median(floors)),
        "python": sys.version.split()[0],
        "redis_py": redis.__version__,
    }
    ratio = res["bare_calls_per_s"] / res["guarded_calls_per_s"]
    if args.json:
        print(json.dumps({**res, "guarded_cost_x": round(ratio, 2)}))
    else:
        print(f"n={args.n} repeats={args.repeats} (medians; operation = one INCR on loopback)")
        print(
            f"  Redis round trips per guarded call  {trips:.3f}"
            f"  {res['guard_commands']}  (target 2: begin + complete)"
        )
        print(f"  commands run inside the scripts      {res['script_commands_per_call']} per call")
        print(f"  bare operation            {res['bare_calls_per_s']:>9} calls/s")
        print(
            f"  guarded (begin+op+complete) {res['guarded_calls_per_s']:>7} calls/s"
            f"  -> {ratio:.2f}x the bare time (3 round trips instead of 1)"
        )
        print(
            f"  floor (op + 2 no-op scripts) {res['floor_calls_per_s']:>6} calls/s"
            "  (what 3 round trips cost on this machine)"
        )
        print(f"  replayed retry (begin only) {res['replayed_calls_per_s']:>7} calls/s")
    return 0 if trips <= 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
