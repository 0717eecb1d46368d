"""An app process for the end-to-end tests: reads through the SDK as a user's app would.

It reads each ``--key`` at ``--rate`` per second through ``HotCache.from_url`` (or
``AsyncHotCache``), plus ``--cold-rate`` GETs of keys that do not exist, for
``--seconds``. With ``--kafka`` its Redis client is instrumented with the Kafka
``Reporter`` (``hotkeyd.client.reporter.instrument``). It writes its progress (reads of
the key so far, wall time) to ``--progress`` every 0.2 s, and ``"done"`` at the end, so
the test can relate the server's counters to the reads the apps really made. Nothing
here talks to the daemon: the SDK does.

    python tests/client/loadapp.py --url redis://... --ns hk-x --key product:1 \\
        --rate 2000 --seconds 30 --progress /tmp/p.json [--mode async] [--kafka host:port/topic]
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import sys
import threading
import time
from typing import Any

import redis
import redis.asyncio as aredis

from hotkeyd.client import AsyncHotCache, HotCache
from hotkeyd.client.reporter import Reporter, instrument
from hotkeyd.protocol.wire import Namespace

STEP = 0.01  # seconds per paced batch


class Progress:
    def __init__(self, path: str) -> None:
        self.path = path
        self.reads = 0
        self.cold = 0
        self.start = time.time()
        self._next = 0.0

    def write(self, *, done: bool = False, **extra: Any) -> None:
        now = time.monotonic()
        if not done and now < self._next:
            return
        self._next = now + 0.2
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(
                {"reads": self.reads, "cold": self.cold, "t": time.time(), "done": done, **extra}, f
            )
        os.replace(tmp, self.path)


def plan(rate: float, cold_rate: float, seconds: float) -> tuple[int, float, int]:
    steps = int(seconds / STEP)
    return steps, cold_rate * STEP, max(1, round(rate * STEP))


def run_sync(args: argparse.Namespace, p: Progress) -> None:
    client = redis.Redis.from_url(args.url)
    reporter = None
    if args.kafka:
        bootstrap, topic = args.kafka.split("/", 1)
        reporter = Reporter(bootstrap, topic, flush_interval=0.1)
        instrument(client, reporter)
    cache = HotCache(client, namespace=Namespace(args.ns), report_demand=not args.no_demand)
    cache.start()
    steps, cold_per, per = plan(args.rate, args.cold_rate, args.seconds)
    cold_acc = 0.0
    t = time.monotonic()
    p.write(done=False)
    for i in range(steps):
        for key in args.key:
            for _ in range(per):
                cache.get(key)
        p.reads += per * len(args.key)
        cold_acc += cold_per
        while cold_acc >= 1:
            cold_acc -= 1
            cache.get(f"cold:{i % 997}:{p.cold}")
            p.cold += 1
        p.write()
        t += STEP
        time.sleep(max(0.0, t - time.monotonic()))
    end = time.time()
    stats = cache.demand_stats
    cache.close()  # sends the last demand report
    if reporter is not None:
        reporter.close()
    client.close()
    p.write(done=True, end=end, demand=vars(stats) if stats else None)


def _dump_tasks(loop: asyncio.AbstractEventLoop, after: float) -> None:
    """If the app overruns by ``after`` s, print where every task and thread is (a hang's
    diagnosis in the test log), then keep waiting: the test decides the verdict."""
    time.sleep(after)
    print(f"loadapp: still running {after:.0f} s after start; asyncio tasks:", file=sys.stderr)
    try:
        for task in list(asyncio.all_tasks(loop)):  # not thread-safe: a diagnostic only
            task.print_stack(file=sys.stderr)
    except RuntimeError as exc:
        print(f"loadapp: tasks changed while listed ({exc})", file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr)


async def run_async(args: argparse.Namespace, p: Progress) -> None:
    threading.Thread(
        target=_dump_tasks, args=(asyncio.get_running_loop(), args.seconds + 20), daemon=True
    ).start()
    client = aredis.Redis.from_url(args.url)
    cache = AsyncHotCache(client, namespace=Namespace(args.ns), report_demand=not args.no_demand)
    await cache.start()
    steps, cold_per, per = plan(args.rate, args.cold_rate, args.seconds)
    cold_acc = 0.0
    t = time.monotonic()
    p.write(done=False)
    for i in range(steps):
        for key in args.key:
            for _ in range(per):
                await cache.get(key)
        p.reads += per * len(args.key)
        cold_acc += cold_per
        while cold_acc >= 1:
            cold_acc -= 1
            await cache.get(f"cold:{i % 997}:{p.cold}")
            p.cold += 1
        p.write()
        t += STEP
        await asyncio.sleep(max(0.0, t - time.monotonic()))
    end = time.time()
    stats = cache.demand_stats
    await cache.close()
    await client.aclose()
    p.write(done=True, end=end, demand=vars(stats) if stats else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--ns", required=True)
    ap.add_argument("--key", required=True, action="append", help="repeatable")
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--cold-rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--progress", required=True)
    ap.add_argument("--mode", choices=("sync", "async"), default="sync")
    ap.add_argument("--kafka", help="bootstrap/topic: instrument the client with the Reporter")
    ap.add_argument("--no-demand", action="store_true", help="report_demand=False (issue 11)")
    args = ap.parse_args()
    p = Progress(args.progress)
    faulthandler.dump_traceback_later(args.seconds + 25, exit=False)  # a hang shows its stacks
    if args.mode == "async":
        asyncio.run(run_async(args, p))
    else:
        run_sync(args, p)


if __name__ == "__main__":
    main()
