"""The daemon's demand intake: validation, caps, bounded queue and drain, on real Redis."""

from __future__ import annotations

import itertools
import json
import time

import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.demand import DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.sources.demand import DemandIntake
from hotkeyd.testing import RedisServer, free_port
from tests.client.helpers import wait_until

NS = Namespace("t")


_SEQ = itertools.count(1)


def report(*entries: tuple[bytes, int, int], interval_ms: int = 250, app: str = "app") -> bytes:
    """A current report: the next seq, ts now (the intake drops stale and repeated ones)."""
    return DemandReport(
        app,
        next(_SEQ),
        time.time(),
        interval_ms,
        tuple(DemandEntry(k, n, db) for k, n, db in entries),
    ).dumps()


def sample(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_feed_groups_by_db_caps_absurd_counts_and_drains_in_bounded_steps() -> None:
    m = Metrics()
    intake = DemandIntake(
        "redis://127.0.0.1:1", NS, "d1", metrics=m, max_rate=1000, drain_entries=3
    )
    assert intake.feed(report((b"a", 5, 0), (b"b", 10_000, 0), (b"c", 2, 4)))
    assert intake.feed(report((b"d", 1, 0)))
    assert sample(m, "hotkeyd_demand_entries_ignored_total", reason="capped") == 1
    first = intake.drain()
    assert first == [(0, [b"a", b"b"], [5, 250]), (4, [b"c"], [2])]  # capped at 1000/s * 0.25 s
    assert intake.drain() == [(0, [b"d"], [1])]
    assert intake.drain() == []
    assert sample(m, "hotkeyd_demand_reports_total") == 2
    intake.counted(7, 2)
    assert sample(m, "hotkeyd_demand_local_accesses_total") == 7
    assert sample(m, "hotkeyd_demand_entries_ignored_total", reason="not_hot") == 2


def test_a_key_repeated_in_one_report_is_capped_once_not_per_entry() -> None:
    m = Metrics()
    intake = DemandIntake("redis://127.0.0.1:1", NS, "d1", metrics=m, max_rate=1000)
    forged = [(b"hot", 250, 0)] * 997 + [(b"hot", 7, 2)]  # 997 x the cap for one key
    assert intake.feed(report(*forged, (b"other", 3, 0), (b"other", 4, 0)))
    assert intake.drain() == [(0, [b"hot", b"other"], [250, 7]), (2, [b"hot"], [7])]
    assert sample(m, "hotkeyd_demand_entries_ignored_total", reason="capped") == 1


def test_bad_reports_and_overflow_are_counted_by_reason() -> None:
    m = Metrics()
    intake = DemandIntake("redis://127.0.0.1:1", NS, "d1", metrics=m, max_pending=3)
    assert not intake.feed(b"{")
    assert not intake.feed(12)  # not bytes at all
    assert not intake.feed(json.dumps({"v": 2}).encode())
    assert not intake.feed(b"x" * (2 << 20))
    assert intake.feed(report((b"a", 1, 0), (b"b", 1, 0)))
    assert not intake.feed(report((b"c", 1, 0), (b"d", 1, 0)))  # 4 > max_pending
    for reason, n in (("malformed", 2), ("version", 1), ("oversized", 1), ("overflow", 1)):
        assert sample(m, "hotkeyd_demand_reports_dropped_total", reason=reason) == n


def test_subscribes_to_its_own_channel_and_reconnects(redis_server: RedisServer) -> None:
    m = Metrics()
    intake = DemandIntake(redis_server.url, NS, "d1", metrics=m)
    r = redis.Redis.from_url(redis_server.url)
    intake.start()
    try:
        assert wait_until(lambda: r.pubsub_numsub("t:demand:d1")[0][1] == 1, timeout=5)
        r.publish("t:demand:d2", report((b"other", 1, 0)))  # another instance's
        r.publish("t:demand:d1", report((b"mine", 3, 0)))
        got: list[object] = []
        assert wait_until(lambda: got.extend(intake.drain()) or got, timeout=5)  # type: ignore[func-returns-value]
        assert got == [(0, [b"mine"], [3])]
        r.client_kill_filter(_type="pubsub")
        assert wait_until(lambda: intake.connects == 2, timeout=10)
        assert wait_until(lambda: r.pubsub_numsub("t:demand:d1")[0][1] == 1, timeout=5)
        r.publish("t:demand:d1", report((b"again", 1, 0)))
        assert wait_until(lambda: intake.drain() == [(0, [b"again"], [1])], timeout=5)
    finally:
        intake.close()
        r.close()
    down = DemandIntake(f"redis://127.0.0.1:{free_port()}", NS, "d1", metrics=m)
    down.start()
    try:
        assert wait_until(lambda: down.error is not None, timeout=5)
        assert "unreachable" in down.error.lower()  # type: ignore[union-attr]
    finally:
        down.close()


def test_pending_counts_what_is_queued_so_repeats_do_not_fill_the_queue() -> None:
    intake = DemandIntake("redis://127.0.0.1:1", NS, "d1", metrics=Metrics(), max_pending=3)
    for i in range(10):  # 3 entries, 1 key each time: queued, drained, nothing left over
        assert intake.feed(report((b"a", 1, 0), (b"a", 1, 0), (b"a", 1, 0), app=f"app-{i}"))
        assert intake.drain() == [(0, [b"a"], [3])]


def test_close_wakes_an_idle_intake_at_once_and_counts_no_lost_subscription(
    redis_server: RedisServer,
) -> None:
    # An idle intake waits in recv() for seconds (it used to wake four times a second);
    # close() shuts its socket down to end that wait, which is not a lost subscription.
    m = Metrics()
    intake = DemandIntake(redis_server.url, NS, "idle", metrics=m)
    r = redis.Redis.from_url(redis_server.url)
    intake.start()
    try:
        assert wait_until(lambda: r.pubsub_numsub("t:demand:idle")[0][1] == 1, timeout=5)
        time.sleep(0.3)  # in recv()
        thread = intake._thread
        assert thread is not None
        t0 = time.monotonic()
        intake.close(timeout=10.0)
        took = time.monotonic() - t0
        assert not thread.is_alive()
        assert took < 3.0, took  # the recv() timeout is 5 s
        assert sample(m, "hotkeyd_demand_reports_dropped_total", reason="subscription_lost") == 0
    finally:
        intake.close()
        r.close()
