"""A holder that dies (SIGKILL) or stalls (SIGSTOP) mid-operation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from hotkeyd.idempotency import IdempotencyGuard, Lease, Outcome
from hotkeyd.idempotency.errors import LeaseLostError
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

WORKER = str(Path(__file__).with_name("worker.py"))
LEASE = 1.0


def _start(
    url: str, ns: Namespace, pause: float
) -> tuple[subprocess.Popen[str], dict[str, object]]:
    p = subprocess.Popen(
        [sys.executable, WORKER, "hold", url, ns.prefix, "k", str(LEASE), str(pause)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    return p, json.loads(p.stdout.readline())


def _retry_until_new(guard: IdempotencyGuard) -> Lease:
    deadline = time.monotonic() + 10
    seen = []
    while time.monotonic() < deadline:
        b = guard.begin("k", b"req")
        seen.append(b.outcome)
        if b.outcome is Outcome.NEW:
            assert b.takeover and b.lease is not None
            assert Outcome.IN_PROGRESS in seen  # blocked while the lease ran
            return b.lease
        time.sleep(0.05)
    raise AssertionError(f"never took over: {seen[-3:]}")


def test_sigkill_mid_operation(redis_server: RedisServer, r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=LEASE, ttl=60)
    p, held = _start(redis_server.url, ns, pause=60)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=10)  # reaps it and closes the pipe
    t0 = time.monotonic()
    lease = _retry_until_new(guard)
    assert time.monotonic() - t0 > 0.3  # not before the lease ran out
    assert lease.token > int(str(held["token"]))
    r.incr(f"{ns.prefix}:runs")
    guard.complete(lease, b"retry")
    # every further retry replays; the operation ran once per holder, twice in total
    assert guard.begin("k", b"req").result == b"retry"
    assert int(r.get(f"{ns.prefix}:runs") or 0) == 2
    # the dead holder's complete (its token, e.g. from a queued message) is refused
    dead = Lease("k", str(held["record"]), int(str(held["token"])), lease.fingerprint)
    try:
        guard.complete(dead, b"zombie")
        raise AssertionError("late complete accepted")
    except LeaseLostError:
        pass
    assert guard.begin("k", b"req").result == b"retry"


def test_stalled_holder_is_fenced_when_it_wakes(
    redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=LEASE, ttl=60)
    p, _ = _start(redis_server.url, ns, pause=3.0)  # stopped long before it wakes
    os.kill(p.pid, signal.SIGSTOP)  # a GC pause, a frozen VM
    try:
        lease = _retry_until_new(guard)
        guard.complete(lease, b"new holder")
    finally:
        os.kill(p.pid, signal.SIGCONT)
    out, _ = p.communicate(timeout=20)
    assert out.startswith("rejected:") and "took over" in out
    assert guard.begin("k", b"req").result == b"new holder"
