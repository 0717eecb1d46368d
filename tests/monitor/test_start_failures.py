"""A tapped server down at start: the source runs, counts it, and taps it once it is up.

Only problems retrying cannot fix (wrong password, NOPERM, TLS verification) fail
``start()``; those are tested in test_source.py. Here a port is reserved with
``free_port()`` and a real redis-server is started on it later.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Message
from hotkeyd.testing import DaemonProcess, RedisServer, free_port, wait_for_port

from .helpers import Tally, metric, url

pytestmark = pytest.mark.integration

FAST = {"backoff_initial": 0.05, "backoff_max": 0.5, "connect_timeout": 1.0}


def down_lines(caplog: pytest.LogCaptureFixture, where: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and where in r.getMessage()
    ]


def test_one_server_down_at_start_others_tapped_then_it_joins(
    redis_server: RedisServer,
    source_factory: Any,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hotkeyd.sources.monitor.source")
    port = free_port()
    late_url = f"redis-monitor://127.0.0.1:{port}"
    src = source_factory([url(redis_server), late_url], **FAST)
    src.start()  # must not raise: the other server is fine
    assert len(src.taps) == 2
    assert metric(metrics, "hotkeyd_source_errors_total", source="monitor", kind="connection") >= 1
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="unreachable") >= 1
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="restart") == 0

    up = redis.Redis(port=redis_server.port)
    tally = Tally()
    assert tally.pump(src, lambda t: bool(up.set("on-up", 1)) and (0, b"on-up") in t.writes)
    assert tally.servers == {url(redis_server)}
    lines = down_lines(caplog, late_url)
    assert len(lines) == 1, lines  # one line per server, rate-limited despite retries
    assert "cannot reach" in lines[0] and "retrying" in lines[0]
    retries = metric(metrics, "hotkeyd_monitor_disconnects_total", reason="unreachable")
    assert tally.pump(
        src,
        lambda t: (
            metric(metrics, "hotkeyd_monitor_disconnects_total", reason="unreachable") > retries
        ),
    )  # it keeps retrying in the background

    with RedisServer(port=port) as late:
        r = redis.Redis(port=late.port)

        def joined(t: Tally) -> bool:
            # MSET's keys come from the late server's own command table (step 2):
            # fetched on its first connection, the values are not keys
            r.mset({"late-a": "va", "late-b": "vb"})
            r.get("late-a")
            return (0, b"late-a") in t.writes and t.reads(0, b"late-a") >= 1

        assert tally.pump(src, joined, timeout=20)
        assert (0, b"va") not in tally.total and (0, b"vb") not in tally.total
        assert (0, b"late-b") in tally.writes
        assert tally.servers == {url(redis_server), late_url}
        up.set("still-up", 1)
        assert tally.pump(src, lambda t: (0, b"still-up") in t.writes)
        assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="restart") == 0


@pytest.mark.parametrize("duty", [1.0, 0.5])
def test_single_server_down_at_start_then_batches_flow(
    source_factory: Any, metrics: Metrics, duty: float
) -> None:
    port = free_port()
    src = source_factory([f"redis-monitor://127.0.0.1:{port}"], duty=duty, **FAST)
    src.start()
    assert metric(metrics, "hotkeyd_source_errors_total", source="monitor", kind="connection") >= 1
    assert src.next_batch(0.05) == []  # nothing yet, and next_batch still returns
    assert src.next_batch(0.0) == []
    with RedisServer(port=port) as rs:
        r = redis.Redis(port=rs.port)
        tally = Tally()

        def flowing(t: Tally) -> bool:
            r.incr("late-counter")
            return t.writes.get((0, b"late-counter"), 0) >= 3 / duty

        assert tally.pump(src, flowing, timeout=20)
        assert src.taps[0].ever_connected


def test_down_at_start_then_it_restarts_counts_as_restart(
    source_factory: Any, metrics: Metrics
) -> None:
    # once a late server has been tapped, losing it again is an ordinary restart
    port = free_port()
    src = source_factory([f"redis-monitor://127.0.0.1:{port}"], **FAST)
    src.start()
    with RedisServer(port=port) as rs:
        r = redis.Redis(port=rs.port)
        tally = Tally()
        assert tally.pump(src, lambda t: bool(r.set("k1", 1)) and (0, b"k1") in t.writes)
        rs.restart(down_for=0.3)
        r = redis.Redis(port=rs.port)
        assert tally.pump(src, lambda t: bool(r.set("k2", 1)) and (0, b"k2") in t.writes)
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="restart") >= 1


def test_daemon_keeps_running_with_one_server_down(
    redis_server: RedisServer, shared_redis: RedisServer, unique: str, tmp_path: Path
) -> None:
    """``hotkeyd run -s <up> -s <down>`` runs, then publishes a hot key of the late one."""
    rules = tmp_path / "rules.toml"
    rules.write_text("[default]\nthreshold = 300\nttl = 2.0\ncooldown = 1.0\n")
    channel = f"hk-late-{unique}"
    sub = redis.Redis(port=shared_redis.port).pubsub()
    sub.subscribe(channel)
    port = free_port()
    late_url = f"redis-monitor://127.0.0.1:{port}"
    daemon = DaemonProcess(
        "-s", url(redis_server),
        "-s", late_url,
        "--redis-url", f"redis://127.0.0.1:{shared_redis.port}/0",
        "--channel", channel,
        "--namespace", f"hk{unique}",
        "--rules", str(rules),
        "--no-http",
        http=False, stdin=False, log_level=None,
    ).start()  # fmt: skip
    late = RedisServer(port=port)
    hot: set[bytes] = set()
    try:
        deadline = time.monotonic() + 20
        while "cannot reach" not in daemon.stderr and time.monotonic() < deadline:
            assert daemon.running, daemon.stderr
            time.sleep(0.1)
        assert "cannot reach" in daemon.stderr and late_url in daemon.stderr
        assert daemon.running, daemon.stderr  # still running, not exit 1
        late.start()
        wait_for_port(port)
        app = redis.Redis(port=port)
        deadline = time.monotonic() + 40
        while b"hot:late" not in hot and time.monotonic() < deadline:
            assert daemon.running, daemon.stderr
            for _ in range(200):
                app.get("hot:late")
            msg = sub.get_message(timeout=0.01)
            while msg is not None:
                if msg["type"] == "message":
                    hot.update(h.key for h in Message.loads(msg["data"]).hot)
                msg = sub.get_message(timeout=0.0)
    finally:
        daemon.stop(10)
        late.stop()
        sub.close()
    assert b"hot:late" in hot, daemon.stderr
    assert daemon.stderr.count(late_url) <= 3, daemon.stderr  # rate-limited, not a flood


def test_cluster_seed_down_at_start_is_discovered_when_up(source_factory: Any) -> None:
    # cluster or standalone is unknown until the seed answers CLUSTER NODES
    port = free_port()
    src = source_factory([f"redis-monitor://127.0.0.1:{port}"], cluster_refresh=0.2, **FAST)
    src.start()
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    with RedisServer(port=port, extra_args=[*args, "--cluster-port", str(free_port())]) as rs:
        r = redis.Redis(port=rs.port)
        r.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        tally = Tally()

        def seen(t: Tally) -> bool:
            try:
                r.set("in-cluster", 1)
            except redis.ResponseError:  # CLUSTERDOWN until the slots are served
                return False
            return (0, b"in-cluster") in t.writes

        assert tally.pump(src, seen, timeout=20)
        assert [t.target.redis.port for t in src.taps] == [port]
        assert src.taps[0].seed is not None  # known as a cluster primary now
        assert src._refresher is not None  # and its topology is followed
