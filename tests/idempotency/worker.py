"""A guarded worker run as a separate process by the concurrency and crash tests.

python worker.py race URL PREFIX KEY THREADS   # wait for the 'go' key, then race
python worker.py hold URL PREFIX KEY LEASE PAUSE  # begin, report, work PAUSE s, complete
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import redis

from hotkeyd.idempotency import IdempotencyGuard, Outcome
from hotkeyd.idempotency.errors import LeaseLostError
from hotkeyd.protocol.wire import Namespace


def race(url: str, prefix: str, key: str, threads: int) -> None:
    r = redis.Redis.from_url(url)
    guard = IdempotencyGuard(r, namespace=Namespace(prefix), lease=30, ttl=60)
    go = f"{prefix}:go"
    out: list[dict[str, object]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        while not r.exists(go):
            time.sleep(0.001)
        b = guard.begin(key, b"same request")
        first = b.outcome.value
        if b.outcome is Outcome.NEW:
            assert b.lease is not None
            r.incr(f"{prefix}:runs")
            time.sleep(0.3)  # long enough that every other caller arrives meanwhile
            guard.complete(b.lease, f"result of {os.getpid()}-{i}".encode())
            b = guard.begin(key, b"same request")
        elif b.outcome is Outcome.IN_PROGRESS:
            b = guard.begin(key, b"same request", wait=20)
        with lock:
            out.append(
                {"first": first, "final": b.outcome.value, "result": (b.result or b"").decode()}
            )

    ts = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(out), flush=True)


def hold(url: str, prefix: str, key: str, lease: float, pause: float) -> None:
    r = redis.Redis.from_url(url)
    guard = IdempotencyGuard(r, namespace=Namespace(prefix), lease=lease, ttl=60)
    b = guard.begin(key, b"req")
    assert b.outcome is Outcome.NEW and b.lease is not None, b
    r.incr(f"{prefix}:runs")
    print(json.dumps({"token": b.lease.token, "record": b.lease.record}), flush=True)
    time.sleep(pause)  # "working": the test kills or stops us here
    try:
        guard.complete(b.lease, b"from the old holder")
        print("accepted", flush=True)
    except LeaseLostError as exc:
        print(f"rejected: {exc}", flush=True)


if __name__ == "__main__":
    mode, url, prefix, key = sys.argv[1:5]
    if mode == "race":
        race(url, prefix, key, int(sys.argv[5]))
    else:
        hold(url, prefix, key, float(sys.argv[5]), float(sys.argv[6]))
