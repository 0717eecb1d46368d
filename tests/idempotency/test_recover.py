"""recover(): PROCESSING records past their lease are settled by the application."""

from __future__ import annotations

import time

import redis

from hotkeyd.idempotency import IdempotencyGuard, Lease, Outcome, recover
from hotkeyd.protocol.wire import Namespace


def test_recover_completes_or_releases_by_the_callback(r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=0.2, ttl=60)
    paid = {"order-1": b"paid #1"}  # what the application's database says happened
    leases = {k: guard.begin(k, b"x").lease for k in ("order-1", "order-2", "order-3")}
    done = guard.begin("order-4", b"x").lease
    assert done is not None
    guard.complete(done, b"already done")
    time.sleep(0.3)  # every holder "died": leases ran out
    live = IdempotencyGuard(r, namespace=ns, lease=60, ttl=600)
    running = live.begin("order-5", b"x").lease  # a live holder: must be left alone
    asked: list[str] = []

    def check(lease: Lease) -> bytes | None:
        asked.append(lease.key)
        if lease.key == "order-3":
            raise RuntimeError("database unreachable")
        return paid.get(lease.key)

    report = recover(guard, check)
    assert sorted(asked) == ["order-1", "order-2", "order-3"]
    assert (report.scanned, report.stale, report.completed, report.released, report.errors) == (
        5,
        3,
        1,
        1,
        1,
    )
    assert guard.begin("order-1", b"x").result == b"paid #1"
    assert guard.begin("order-2", b"x").outcome is Outcome.NEW  # released: the retry runs
    assert guard.begin("order-3", b"x").outcome is Outcome.IN_PROGRESS  # claimed by recover
    assert guard.begin("order-5", b"x").outcome is Outcome.IN_PROGRESS
    old = leases["order-1"]
    assert old is not None and running is not None
    # the old holder of order-1 is fenced by recover's claim
    try:
        guard.complete(old, b"late")
        raise AssertionError("late complete accepted")
    except Exception as exc:
        assert "refused" in str(exc)
