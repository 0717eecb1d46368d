"""History stream: capped by count and age, read back as intervals, filled by the daemon."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import redis
from service.daemon import Daemon

from hotkeyd.detector.config import Transition
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.publish.history import HistoryWriter, read_history
from hotkeyd.testing import RedisClusterServers, RedisServer


def tr(
    kind: str, key: bytes, at: float, since: float | None = None, peak: float = 0.0
) -> Transition:
    return Transition(
        kind=kind,
        key=key,
        db=0,
        rule="default",
        at=at,
        since=at if since is None else since,
        rate=peak,
        peak=peak,
        reason=kind,
    )


def wait(pred, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


def test_capped_by_count_and_read_back_as_intervals(redis_server: RedisServer, unique: str) -> None:
    ns = Namespace(prefix=f"h{unique}")
    r = redis.Redis(port=redis_server.port)
    metrics = Metrics()
    w = HistoryWriter(r, namespace=ns, instance="i1", maxlen=50, metrics=metrics)
    w.start()
    now = time.time()
    try:
        for i in range(100):  # 100 intervals of 200 entries: only the newest 50 entries stay
            w.record(
                [
                    tr("hot", b"k:%d" % i, now - 300 + i),
                    tr("cool", b"k:%d" % i, now - 299 + i, now - 300 + i, 10.0 + i),
                ]
            )
        assert wait(lambda: w.written == 200)
    finally:
        w.close()
    assert r.xlen(ns.history) == 50
    assert (
        metrics.registry.get_sample_value("hotkeyd_history_entries_total", {"result": "written"})
        == 200
    )
    rows = read_history(r, ns, since=now - 3600)
    assert [iv.key for iv in rows] == [b"k:%d" % i for i in range(75, 100)]
    last = rows[-1]
    assert abs(last.start - (now - 201)) < 0.01 and abs(last.end - (now - 200)) < 0.01  # type: ignore[operator]
    assert last.peak == 109.0 and last.instance == "i1" and last.reason == "cool"
    # time and key filters
    assert [iv.key for iv in read_history(r, ns, since=now - 209.5)] == [
        b"k:%d" % i for i in range(90, 100)
    ]
    assert [iv.key for iv in read_history(r, ns, since=now - 3600, pattern=b"k:8?")] == [
        b"k:%d" % i for i in range(80, 90)
    ]
    assert read_history(r, ns, since=now - 3600, until=now - 1000) == []


def test_capped_by_age(redis_server: RedisServer, unique: str) -> None:
    ns = Namespace(prefix=f"h{unique}")
    r = redis.Redis(port=redis_server.port)
    two_days_ago_ms = int((time.time() - 2 * 86400) * 1000)
    r.xadd(ns.history, {"type": "hot", "key": "old", "at": "0"}, id=f"{two_days_ago_ms}-0")
    w = HistoryWriter(r, namespace=ns, instance="i2", max_age=86400)
    w.start()
    w.record([tr("hot", b"new", time.time())])
    assert wait(lambda: w.written == 1)
    w.close()
    assert [fields[b"key"] for _, fields in r.xrange(ns.history)] == [b"new"]  # type: ignore[index, union-attr]


def test_an_unreachable_redis_loses_nothing_queued(unique: str) -> None:
    server = RedisServer()
    port = server.port
    ns = Namespace(prefix=f"h{unique}")
    w = HistoryWriter(redis.Redis(port=port, socket_timeout=1), namespace=ns, instance="i")
    w.start()
    w.record([tr("hot", b"while-down", time.time())])  # Redis is not running yet
    time.sleep(0.3)
    assert w.written == 0
    with server:
        assert wait(lambda: w.written == 1, 10)
        w.close()
        assert redis.Redis(port=port).xlen(ns.history) == 1


def history_cli(url: str, ns: str, *args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "history",
            "--redis-url",
            url,
            "--namespace",
            ns,
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_daemon_history_survives_a_restart(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    ns = f"h{unique}"
    rules = tmp_path / "rules.toml"
    rules.write_text("[default]\nthreshold = 400\nttl = 2\ncooldown = 0.5\n")
    args = ("--redis-url", redis_server.url, "--namespace", ns, "--rules", str(rules))
    with Daemon(*args) as d:
        d.feed_rate({b"bg": 50.0, b"item:1": 2000.0}, 1.5)
        d.feed_rate({b"bg": 50.0}, 2.0)  # item:1 cools
        d.feed_rate({b"bg": 50.0, b"cart:7": 2000.0}, 1.5)
        assert d.stop() == 0  # cart:7 is still hot: closed with reason "stop"
    with Daemon(*args) as d:
        d.feed_rate({b"bg": 50.0, b"item:2": 2000.0}, 1.5)
        assert d.stop() == 0
    rows = history_cli(redis_server.url, ns, "--since", "5m")
    assert [(r["key"], r.get("reason")) for r in rows] == [
        ("item:1", "cool"),
        ("cart:7", "stop"),
        ("item:2", "stop"),
    ]
    assert len({r["instance"] for r in rows}) == 2
    for r in rows:
        assert 0.5 <= float(r["duration"]) <= 6  # type: ignore[arg-type]
        assert float(r["peak"]) >= 1000  # type: ignore[arg-type]
    assert [r["key"] for r in history_cli(redis_server.url, ns, "--key", "item:*")] == [
        "item:1",
        "item:2",
    ]
    assert history_cli(redis_server.url, ns, "--since", "5m", "--until", "4m") == []
    table = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "history",
            "--redis-url",
            redis_server.url,
            "--namespace",
            ns,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "cart:7" in table and "PEAK/S" in table


def test_daemon_history_on_a_cluster_goes_to_the_slot_owner(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    """On a 3-primary cluster every XADD reaches the primary owning the stream's slot
    (a plain client to the URL's node was answered MOVED, and the history was lost)."""
    seed = redis_cluster.url
    i = 0
    while True:  # a namespace whose stream lives on a node other than the URL's
        ns = f"hc{i}"
        if redis_cluster.node_for(Namespace(prefix=ns).history).url != seed:
            break
        i += 1
    rules = tmp_path / "rules.toml"
    rules.write_text("[default]\nthreshold = 400\nttl = 2\ncooldown = 0.5\n")
    with Daemon("--redis-url", seed, "--namespace", ns, "--rules", str(rules)) as d:
        d.feed_rate({b"bg": 50.0, b"item:c": 2000.0}, 1.5)
        assert d.stop() == 0
    assert "MOVED" not in d.stderr and "cannot write" not in d.stderr, d.stderr
    rows = history_cli(seed, ns, "--since", "5m")
    assert [(r["key"], r.get("reason")) for r in rows] == [("item:c", "stop")]


def test_an_idle_writer_trims_by_age_once_not_every_second(
    redis_server: RedisServer, unique: str
) -> None:
    # The age trim runs at most once a minute; an idle writer used to wake every second
    # and send an XTRIM each time.
    r = redis.Redis.from_url(redis_server.url)
    ns = Namespace(unique)

    def xtrims() -> int:
        return int(r.info("commandstats").get("cmdstat_xtrim", {}).get("calls", 0))

    before = xtrims()
    w = HistoryWriter(r, namespace=ns, instance="idle", max_age=86400)
    w.start()
    try:
        assert wait(lambda: xtrims() > before)  # the first trim, at start
        first = xtrims()
        time.sleep(2.5)
        assert xtrims() == first
        w.record([tr("hot", b"k", time.time())])
        assert wait(lambda: w.written == 1)  # still wakes for an entry at once
    finally:
        w.close()
        r.close()
