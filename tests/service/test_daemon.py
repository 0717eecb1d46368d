"""The daemon end to end: real subprocess, real redis-server, real signals."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer, run_daemon

from .daemon import Daemon, Listener

pytestmark = pytest.mark.integration

RULES = """
[default]
threshold = 400
ttl = 2.0
cooldown = 0.5

[[rule]]
name = "noisy"
prefix = "noisy:"
ignore = true

[[rule]]
name = "carts"
prefix = "cart:"
threshold = 200
ttl = 1.0
cooldown = 0.5
"""

BACKGROUND = {f"bg:{i}".encode(): 8.0 for i in range(60)}


def _rules(tmp_path: Path, text: str = RULES) -> Path:
    p = tmp_path / "rules.toml"
    p.write_text(text)
    return p


def test_key_jumping_to_10x_threshold_goes_hot_then_cools(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    channel = f"hk:{unique}"
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(
            "--redis-url", redis_server.url, "--channel", channel, "--rules", str(_rules(tmp_path))
        ) as d:
            d.feed_rate(BACKGROUND, 1.0)
            assert listener.hot_keys() == []
            d.feed_rate({**BACKGROUND, b"item:42": 4000.0}, 1.5)
            assert listener.wait_for(lambda: b"item:42" in listener.hot_keys(), 3)
            d.feed_rate(BACKGROUND, 2.5)
            assert listener.wait_for(lambda: b"item:42" in listener.cool_keys(), 3)
            assert d.stop() == 0
    finally:
        listener.close()
    # Exactly that key, announced hot once, with its rule and TTL.
    assert set(listener.hot_keys()) == {b"item:42"}
    first_hot = next(h for _, m in listener.messages for h in m.hot if h.key == b"item:42")
    assert first_hot.rule == "default" and first_hot.ttl_ms == 2000
    assert first_hot.rate >= 400
    seqs = [m.seq for _, m in listener.messages]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "sequence must have no gaps"
    assert listener.messages[-1][1].final


def test_rule_precedence_ignore_and_binary_keys(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    channel = f"hk:{unique}"
    listener = Listener(redis_server.url, channel)
    binary = b"bin:\xff\xfe\x00key with space"
    try:
        with Daemon(
            "--redis-url", redis_server.url, "--channel", channel, "--rules", str(_rules(tmp_path))
        ) as d:
            # cart:1 at 300/s is above its rule's 200 but below the default 400;
            # noisy:1 is far above everything but ignored; bg:x stays below.
            d.feed_rate(
                {
                    **BACKGROUND,
                    b"cart:1": 300.0,
                    b"noisy:1": 5000.0,
                    b"item:9": 300.0,
                    binary: 2000.0,
                },
                2.0,
            )
            assert listener.wait_for(lambda: {b"cart:1", binary} <= set(listener.hot_keys()), 3)
            top = d.topk()
            d.stop()
    finally:
        listener.close()
    hot = set(listener.hot_keys())
    assert hot == {b"cart:1", binary}, hot
    rules = {h.key: h.rule for _, m in listener.messages for h in m.hot}
    assert rules[b"cart:1"] == "carts" and rules[binary] == "default"
    ttl = {h.key: h.ttl_ms for _, m in listener.messages for h in m.hot}
    assert ttl[b"cart:1"] == 1000
    # The ignored key is still visible in /topk (not hot), so operators can see it.
    noisy = [t for t in top["top"] if t["key"] == "noisy:1"]
    assert noisy and noisy[0]["hot"] is False


def test_hovering_at_threshold_does_not_flap(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    channel = f"hk:{unique}"
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(
            "--redis-url", redis_server.url, "--channel", channel, "--rules", str(_rules(tmp_path))
        ) as d:
            d.feed_rate({b"item:7": 700.0}, 1.2)
            assert listener.wait_for(lambda: b"item:7" in listener.hot_keys(), 3)
            # Hover around the threshold (400): 380..440 is above 400*0.8 = 320.
            for rate in (380.0, 440.0, 390.0, 420.0, 380.0, 430.0):
                d.feed_rate({b"item:7": rate}, 0.4)
            d.stop()
    finally:
        listener.close()
    # Re-announcements repeat the entry with the same `since`; a flap would start a new one.
    episodes = {h.since for _, m in listener.messages for h in m.hot if h.key == b"item:7"}
    assert len(episodes) == 1, episodes
    assert b"item:7" not in listener.cool_keys()


def test_malformed_lines_are_counted_not_fatal(redis_server: RedisServer, unique: str) -> None:
    channel = f"hk:{unique}"
    with Daemon(
        "--redis-url",
        redis_server.url,
        "--channel",
        channel,
        "--input-format",
        "counted",
        "--max-key-len",
        "64",
    ) as d:
        d.feed(
            b"good\t5\nbad\tNaN\nnocount\n"
            + b"x" * 100
            + b"\t3\n"
            + b"y" * 10_000_000
            + b"\nlater\t7\n"
        )
        time.sleep(0.6)
        assert d.metric("hotkeyd_source_malformed_total", reason="malformed") >= 2
        assert d.metric("hotkeyd_source_malformed_total", reason="oversized") >= 2
        assert d.metric("hotkeyd_source_events_total") >= 12
        assert d.proc is not None and d.proc.poll() is None
        assert d.stop() == 0


def test_redis_restart_mid_run_republishes_full_hot_set(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    channel = f"hk:{unique}"
    with Daemon(
        "--redis-url", redis_server.url, "--channel", channel, "--rules", str(_rules(tmp_path))
    ) as d:
        d.feed_rate({b"item:1": 3000.0}, 1.0)
        redis_server.kill()
        # Detection goes on while Redis is down: a new key turns hot meanwhile.
        d.feed_rate({b"item:1": 3000.0, b"item:2": 3000.0}, 1.0)
        assert d.metric("hotkeyd_publish_failures_total") >= 1
        redis_server.start()
        listener = Listener(redis_server.url, channel)
        try:
            d.feed_rate({b"item:1": 3000.0, b"item:2": 3000.0}, 0.3)
            got = listener.wait_for(
                lambda: (
                    any(
                        m.full and {h.key for h in m.hot} >= {b"item:1", b"item:2"}
                        for _, m in listener.messages
                    )
                    or False
                ),
                10,
            )
            assert got or {b"item:1", b"item:2"} <= {
                h.key for _, m in listener.messages for h in m.hot
            }, listener.messages
        finally:
            listener.close()
        assert d.stop() == 0


def test_sighup_reload_good_then_bad(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    channel = f"hk:{unique}"
    rules = _rules(tmp_path)
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(
            "--redis-url", redis_server.url, "--channel", channel, "--rules", str(rules)
        ) as d:
            d.feed_rate({b"shop:1": 250.0}, 1.2)
            assert b"shop:1" not in listener.hot_keys()
            rules.write_text(
                RULES + '\n[[rule]]\nname = "shop"\nprefix = "shop:"\nthreshold = 100\n'
            )
            d.signal(signal.SIGHUP)
            d.feed_rate({b"shop:1": 250.0}, 1.2)
            assert listener.wait_for(lambda: b"shop:1" in listener.hot_keys(), 3)
            rules.write_text('[[rule]]\nname = "broken"\nprefix = "x"\nthreshold = "abc"\n')
            d.signal(signal.SIGHUP)
            d.feed_rate({b"shop:1": 250.0}, 0.6)
            assert d.metric("hotkeyd_rules_reloads_total", result="rejected") == 1
            assert d.metric("hotkeyd_rules_reloads_total", result="ok") == 1
            # Old (good) rules stay in force: the key is still hot, not cooled.
            assert b"shop:1" not in listener.cool_keys()
            assert d.stop() == 0
            assert "line 4" in d.stderr and "threshold" in d.stderr
    finally:
        listener.close()


def test_sigterm_exits_zero_with_final_message(redis_server: RedisServer, unique: str) -> None:
    channel = f"hk:{unique}"
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon("--redis-url", redis_server.url, "--channel", channel) as d:
            d.feed_rate({b"item:5": 3000.0}, 1.0)
            assert listener.wait_for(lambda: b"item:5" in listener.hot_keys(), 3)
            t0 = time.monotonic()
            assert d.stop() == 0
            assert time.monotonic() - t0 < 6
        assert listener.wait_for(lambda: listener.messages and listener.messages[-1][1].final, 3)
    finally:
        listener.close()
    final = listener.messages[-1][1]
    assert [h.key for h in final.hot] == [b"item:5"]


def test_top_and_watch_read_a_running_daemon(redis_server: RedisServer, unique: str) -> None:
    import json
    import subprocess
    import sys

    channel = f"hk:{unique}"
    ns = f"ns{unique}"
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "watch",
            "--redis-url",
            redis_server.url,
            "--namespace",
            ns,
            "--channel",
            channel,
            "--json",
            "--count",
            "2",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.8)  # let the watcher subscribe
        with Daemon("--redis-url", redis_server.url, "--namespace", ns, "--channel", channel) as d:
            d.feed_rate({b"item:77": 3000.0, b"item:78": 50.0}, 1.5)
            top = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hotkeyd",
                    "top",
                    "--redis-url",
                    redis_server.url,
                    "--namespace",
                    ns,
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            table = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hotkeyd",
                    "top",
                    "--http",
                    f"http://127.0.0.1:{d.http_port}",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            d.stop()
        out, _ = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    data = json.loads(top.stdout)
    assert [h["key"] for h in data["hot"]] == ["item:77"]
    assert any(t["key"] == "item:78" for t in data["top"])
    assert "item:77" in table.stdout and "RATE/s" in table.stdout
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 2 and any(h["key"] == "item:77" for m in lines for h in m["hot"])


PUBLISHER_ACL = (
    "+set +pexpire +zadd +zrem +zremrangebyscore +del +xadd +xtrim +publish +subscribe +multi "
    "+exec +ping"
)


def test_publisher_runs_with_the_documented_minimal_acl_user(
    redis_server: RedisServer, unique: str
) -> None:
    """README's ACL line for the publisher is enough, and nothing else is needed."""
    import redis as redis_py

    admin = redis_py.Redis.from_url(redis_server.url)
    ns = f"acl{unique}"
    admin.execute_command(
        "ACL", "SETUSER", "hkpub", "on", ">pw", f"~{{{ns}}}:*", f"&{ns}:*", *PUBLISHER_ACL.split()
    )
    url = f"redis://hkpub:pw@127.0.0.1:{redis_server.port}/0"
    listener = Listener(redis_server.url, f"{ns}:events")
    try:
        with Daemon("--redis-url", url, "--namespace", ns) as d:
            d.feed_rate({b"item:3": 3000.0}, 1.2)
            assert listener.wait_for(lambda: b"item:3" in listener.hot_keys(), 3)
            instance = listener.messages[-1][1].instance
            assert admin.get(Namespace(ns).snapshot(instance)) is not None
            assert d.metric("hotkeyd_publish_failures_total") == 0
            # the same user may SUBSCRIBE to the instance's demand reports
            report: dict[str, Any] = {"v": 1, "type": "demand", "app": "a", "seq": 1, "ts": 0,
                      "interval_ms": 250, "entries": [{"key": "item:3", "n": 5}]}  # fmt: skip
            deadline = time.monotonic() + 10
            while d.metric("hotkeyd_demand_local_accesses_total") < 5:
                assert time.monotonic() < deadline, "the demand intake never subscribed"
                report["seq"], report["ts"] = report["seq"] + 1, time.time()  # fresh, new
                admin.publish(Namespace(ns).demand_channel(instance), json.dumps(report))
                time.sleep(0.2)
            assert d.stop() == 0
    finally:
        listener.close()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert PUBLISHER_ACL in readme


def test_wrong_redis_password_fails_fast_with_exit_2(redis_server: RedisServer) -> None:

    import redis as redis_py

    redis_py.Redis.from_url(redis_server.url).config_set("requirepass", "right")
    proc = run_daemon(
        "--no-http",
        "--redis-url",
        f"redis://:wrong@127.0.0.1:{redis_server.port}/0",
        input=b"a\n",
        timeout=30,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "wrong" not in err and "Traceback" not in err and "authentication" in err.lower()


def test_redis_down_at_start_runs_degraded_then_publishes(unique: str) -> None:
    """Detection goes on without Redis; /healthz says degraded (not 503); it catches up."""
    import json
    import urllib.request

    from hotkeyd.testing import free_port

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    channel = f"hk:{unique}"
    with Daemon("--redis-url", url, "--channel", channel) as d:
        d.feed_rate({b"item:8": 3000.0}, 1.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{d.http_port}/healthz", timeout=5) as r:
            health = json.loads(r.read())
            assert r.status == 200
        assert health["status"] == "degraded" and health["reasons"]
        assert d.metric("hotkeyd_publish_failures_total") >= 1
        with RedisServer(port=port) as rs:
            listener = Listener(rs.url, channel)
            try:
                d.feed_rate({b"item:8": 3000.0}, 0.5)
                assert listener.wait_for(
                    lambda: any(b"item:8" in {h.key for h in m.hot} for _, m in listener.messages),
                    10,
                )
            finally:
                listener.close()
            assert d.stop() == 0


def test_finite_input_with_notifications_unsent_exits_1() -> None:

    from hotkeyd.testing import free_port

    proc = run_daemon(
        "--no-http",
        "--shutdown-timeout",
        "1",
        "--redis-url",
        f"redis://127.0.0.1:{free_port()}/0",
        input=b"hot\n" * 5000,
        timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "could not be published" in err and "Traceback" not in err


def test_watch_survives_a_redis_restart(redis_server: RedisServer, unique: str) -> None:
    import subprocess
    import sys

    import redis as redis_py

    channel = f"hk:{unique}"
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "watch",
            "--redis-url",
            redis_server.url,
            "--channel",
            channel,
            "--json",
            "--count",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = redis_py.Redis.from_url(redis_server.url)
        deadline = time.monotonic() + 30  # a loaded CI box starts Python slowly
        while client.pubsub_numsub(channel)[0][1] < 1:  # watch is subscribed before the restart
            assert watch.poll() is None and time.monotonic() < deadline, watch.communicate()
            time.sleep(0.1)
        redis_server.restart(down_for=0.5)
        deadline = time.monotonic() + 15
        client = redis_py.Redis.from_url(redis_server.url)
        while watch.poll() is None and time.monotonic() < deadline:
            client.publish(channel, b'{"v":1,"instance":"x","seq":1,"ts":1.0,"hot":[],"cool":[]}')
            time.sleep(0.3)
        out, err = watch.communicate(timeout=10)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 0, err
    assert "reconnect" in err and "Traceback" not in err
    assert [json.loads(line)["instance"] for line in out.splitlines()] == ["x"]  # --count 1


def test_a_source_failing_at_start_leaves_no_live_snapshot(redis_server: RedisServer) -> None:
    """A half-started daemon must not keep heartbeating as if it were alive."""
    import threading

    import redis as redis_py

    from hotkeyd.daemon.config import Settings
    from hotkeyd.daemon.service import Service
    from hotkeyd.errors import HotkeydError

    class Broken:
        name = "broken"
        exhausted = False
        error = None
        connected = True
        unhealthy = None
        reports_idle = False

        def idle_watermark(self) -> None:
            return None

        def start(self) -> None:
            raise HotkeydError("cannot open source")

        def next_batch(self, max_wait: float) -> list:
            return []

        def commit(self) -> None:
            pass

        def close(self) -> None:
            pass

    svc = Service(
        Settings(redis_url=redis_server.url, instance="half", http_port=None), sources=[Broken()]
    )
    with pytest.raises(HotkeydError):
        svc.run()
    time.sleep(1.5)  # longer than a heartbeat
    assert not [t for t in threading.enumerate() if t.name.startswith("hotkeyd-publish")]
    r = redis_py.Redis.from_url(redis_server.url)
    assert not r.exists(Namespace().snapshot("half"))
    assert b"half" not in r.zrange(Namespace().instances, 0, -1)
