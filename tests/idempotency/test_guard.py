"""The guard's states and outcomes against a real redis-server."""

from __future__ import annotations

import time

import pytest
import redis

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency import IdempotencyGuard, IdempotencyNames, Lease, Outcome
from hotkeyd.idempotency.errors import LeaseLostError
from hotkeyd.protocol.wire import Namespace


@pytest.fixture
def guard(r: redis.Redis, ns: Namespace) -> IdempotencyGuard:
    return IdempotencyGuard(r, namespace=ns, lease=5, ttl=10)


@pytest.fixture
def short(r: redis.Redis, ns: Namespace) -> IdempotencyGuard:
    """A guard whose leases run out quickly (0.3 s)."""
    return IdempotencyGuard(r, namespace=ns, lease=0.3, ttl=10)


def test_new_then_in_progress_then_done(guard: IdempotencyGuard) -> None:
    b = guard.begin("order-1", b"body")
    assert b.outcome is Outcome.NEW and b.lease is not None and not b.takeover
    busy = guard.begin("order-1", b"body")
    assert busy.outcome is Outcome.IN_PROGRESS
    assert 0 < busy.retry_after <= 5
    guard.complete(b.lease, b"\x00result\xff")
    done = guard.begin("order-1", b"body")
    assert done.outcome is Outcome.DONE
    assert done.result == b"\x00result\xff" and not done.failed


def test_reuse_with_another_body_is_a_mismatch_never_a_replay(guard: IdempotencyGuard) -> None:
    b = guard.begin("order-2", b"amount=1")
    assert guard.begin("order-2", b"amount=2").outcome is Outcome.MISMATCH
    assert b.lease is not None
    guard.complete(b.lease, b"ok")
    m = guard.begin("order-2", b"amount=2")
    assert m.outcome is Outcome.MISMATCH and m.result is None


def test_fail_is_final_and_replayed(guard: IdempotencyGuard) -> None:
    b = guard.begin("pay-1", b"x")
    assert b.lease is not None
    guard.fail(b.lease, b"declined")
    again = guard.begin("pay-1", b"x")
    assert again.outcome is Outcome.DONE and again.failed and again.result == b"declined"


def test_release_lets_the_next_caller_run(guard: IdempotencyGuard) -> None:
    b = guard.begin("k", b"x")
    assert b.lease is not None
    guard.release(b.lease)
    b2 = guard.begin("k", b"x")
    assert b2.outcome is Outcome.NEW and b2.lease is not None
    assert b2.lease.token > b.lease.token
    with pytest.raises(LeaseLostError):
        guard.complete(b.lease, b"stale holder")


def test_expired_lease_is_taken_over_and_the_old_holder_is_fenced(short: IdempotencyGuard) -> None:
    old = short.begin("k", b"x")
    time.sleep(0.4)  # lease 0.3 s
    new = short.begin("k", b"x")
    assert new.outcome is Outcome.NEW and new.takeover
    assert old.lease is not None and new.lease is not None
    assert new.lease.token > old.lease.token
    with pytest.raises(LeaseLostError, match="took over"):
        short.complete(old.lease, b"late")
    with pytest.raises(LeaseLostError):
        short.extend(old.lease)
    short.complete(new.lease, b"winner")
    assert short.begin("k", b"x").result == b"winner"


def test_an_expired_lease_nobody_took_can_still_complete(short: IdempotencyGuard) -> None:
    b = short.begin("k", b"x")
    time.sleep(0.4)
    assert b.lease is not None
    short.complete(b.lease, b"slow but alone")
    assert short.begin("k", b"x").result == b"slow but alone"


def test_extend_keeps_others_out(short: IdempotencyGuard, r: redis.Redis) -> None:
    b = short.begin("k", b"x")
    assert b.lease is not None
    for _ in range(3):
        time.sleep(0.2)  # past most of the 0.3 s lease, but each extend renews it
        short.extend(b.lease, 2.0)
    assert short.begin("k", b"x").outcome is Outcome.IN_PROGRESS
    short.extend(b.lease, 60)  # longer than the TTL: the record lives as long
    assert r.pttl(b.lease.record) > 50_000


def test_wait_returns_the_result_of_the_holder(r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns, lease=5, ttl=10)
    b = guard.begin("k", b"x")
    assert b.lease is not None
    lease: Lease = b.lease

    import threading

    threading.Timer(0.2, lambda: guard.complete(lease, b"done later")).start()
    t0 = time.monotonic()
    w = guard.begin("k", b"x", wait=5)
    assert w.outcome is Outcome.DONE and w.result == b"done later"
    assert time.monotonic() - t0 < 4
    # a short wait gives up with IN_PROGRESS
    b2 = guard.begin("k2", b"x")
    assert guard.begin("k2", b"x", wait=0.1).outcome is Outcome.IN_PROGRESS
    assert b2.lease is not None


def test_records_have_fixed_length_names_and_a_ttl(
    guard: IdempotencyGuard, r: redis.Redis, ns: Namespace
) -> None:
    for key in ("a", "x" * 255):
        b = guard.begin(key, b"")
        assert b.lease is not None
        assert len(b.lease.record) == len(IdempotencyNames(ns.prefix).record("0" * 32))
        guard.complete(b.lease, b"r")
        assert 0 < r.pttl(b.lease.record) <= 10_000


def test_scopes_are_separate(r: redis.Redis, ns: Namespace) -> None:
    a = IdempotencyGuard(r, namespace=ns, scope="svc-a")
    b = IdempotencyGuard(r, namespace=ns, scope="svc-b")
    assert a.begin("k", b"1").outcome is Outcome.NEW
    assert b.begin("k", b"2").outcome is Outcome.NEW


def test_audit_stream_records_each_transition_and_is_capped(r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns, audit_maxlen=100)
    b = guard.begin("k", b"x")
    assert b.lease is not None
    guard.complete(b.lease, b"r")
    events = [(e[b"ev"], e[b"op"]) for _, e in r.xrange(IdempotencyNames(ns.prefix).audit)]  # type: ignore[index, union-attr]
    assert events == [(b"begin", b"k"), (b"done", b"k")]
    for i in range(1000):
        b = guard.begin(f"k{i}", b"x")
        assert b.lease is not None
        guard.release(b.lease)
    assert r.xlen(IdempotencyNames(ns.prefix).audit) < 500  # MAXLEN ~ 100 trims in whole nodes
    off = IdempotencyGuard(r, namespace=Namespace("other"), audit_maxlen=0)
    off.begin("k", b"x")
    assert not r.exists("other:idem-audit")


def test_bad_settings_are_clear(r: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="ttl"):
        IdempotencyGuard(r, lease=10, ttl=5)
    with pytest.raises(ConfigError, match="on_error"):
        IdempotencyGuard(r, on_error="maybe")
    with pytest.raises(ConfigError, match="lease"):
        IdempotencyGuard(r, lease=0)


def test_one_round_trip_for_begin_and_one_for_complete(r: redis.Redis, ns: Namespace) -> None:
    guard = IdempotencyGuard(r, namespace=ns)
    warm = guard.begin("warm", b"x")  # loads the scripts (a first EVALSHA may be NOSCRIPT)
    assert warm.lease is not None
    guard.complete(warm.lease, b"r")
    seen: list[str] = []
    with r.monitor() as m:
        watcher = redis.Redis(connection_pool=r.connection_pool)
        b = guard.begin("k", b"x")
        assert b.lease is not None
        guard.complete(b.lease, b"r")
        watcher.echo("stop")
        for cmd in m.listen():
            if cmd["command"].startswith("ECHO"):
                break
            name = cmd["command"].split(" ", 1)[0]
            if cmd.get("client_type") != "lua" and name not in ("HELLO", "CLIENT"):
                seen.append(name)  # (HELLO: a new pooled connection says hello once)
    assert seen == ["EVALSHA", "EVALSHA"]


def test_stats_and_prometheus_metrics(r: redis.Redis, ns: Namespace) -> None:
    from prometheus_client import CollectorRegistry

    from hotkeyd.idempotency import IdempotencyMetrics
    from hotkeyd.idempotency.errors import IdempotencyKeyError

    registry = CollectorRegistry()
    guard = IdempotencyMetrics(registry).watch(
        IdempotencyGuard(r, namespace=ns, scope="orders", lease=0.2, ttl=10)
    )
    old = guard.begin("k", b"x").lease
    guard.begin("k", b"x")
    guard.begin("k", b"y")
    with pytest.raises(IdempotencyKeyError):
        guard.begin("", b"x")
    time.sleep(0.3)
    new = guard.begin("k", b"x").lease
    assert old is not None and new is not None
    with pytest.raises(LeaseLostError):
        guard.complete(old, b"late")
    guard.complete(new, b"r")
    guard.begin("k", b"x")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"scope": "orders", **labels})

    assert value("hotkeyd_idempotency_begins_total", outcome="new") == 2
    assert value("hotkeyd_idempotency_begins_total", outcome="in_progress") == 1
    assert value("hotkeyd_idempotency_begins_total", outcome="mismatch") == 1
    assert value("hotkeyd_idempotency_begins_total", outcome="done") == 1
    assert value("hotkeyd_idempotency_takeovers_total") == 1
    assert value("hotkeyd_idempotency_lease_lost_total") == 1
    assert value("hotkeyd_idempotency_bad_input_total") == 1
    assert guard.stats.unavailable == 0


def test_keepalive_holds_a_short_lease_and_reports_a_loss(
    short: IdempotencyGuard, r: redis.Redis
) -> None:
    from hotkeyd.idempotency import KeepAlive

    b = short.begin("long-job", b"x")
    assert b.lease is not None
    with KeepAlive(short, b.lease, every=0.05) as ka:
        time.sleep(1.0)  # more than three 0.3 s leases
        assert short.begin("long-job", b"x").outcome is Outcome.IN_PROGRESS
        assert ka.beats >= 5 and not ka.lost.is_set()
    short.complete(b.lease, b"done")
    assert short.begin("long-job", b"x").result == b"done"

    b2 = short.begin("lost-job", b"x")
    assert b2.lease is not None
    with KeepAlive(short, b2.lease, every=0.05) as ka:
        r.delete(b2.lease.record)  # e.g. an operator, or a Redis restart
        assert ka.lost.wait(5)
