"""The operator's views without the CLI: top table, event lines, watch's reconnects, health."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from hotkeyd.backoff import Backoff
from hotkeyd.clock import ManualClock
from hotkeyd.console.events import follow_channel
from hotkeyd.console.health import check_heartbeat, check_http, newest_heartbeat
from hotkeyd.console.text import format_message, render_top, show_key
from hotkeyd.console.top import TopReader
from hotkeyd.errors import ConfigError, HotkeydError, UnreachableError
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message, Namespace
from hotkeyd.testing import RedisServer, free_port


def test_show_key_escapes_control_and_invalid_bytes_and_truncates() -> None:
    assert show_key(b"a\x00b\xff") == "a\\x00b\\xff"
    assert show_key(b"x" * 100, width=10) == "xxxxxxx..."


def test_render_top_lists_hot_first_then_others_by_rate() -> None:
    data = {
        "instances": ["i1"],
        "hot": [{"key": "hot:1", "rate": 10.0, "rule": "r", "since": 95.0}],
        "top": [
            {"key": "cold:1", "rate": 50.0, "rule": "default"},
            {"key": "hot:1", "rate": 10.0, "rule": "r"},
            {"key": "cold:2", "rate": 70.0, "rule": "default"},
        ],
    }
    lines = render_top(data, limit=10, now=100.0).splitlines()
    assert lines[0].startswith("hot keys: 1") and "i1" in lines[0]
    rows = [ln for ln in lines[3:] if ln.strip() and not ln.startswith("* =")]
    assert [r.split()[0].lstrip("*") for r in rows] == ["hot:1", "cold:2", "cold:1"]
    assert rows[0].startswith("*") and "5.0s ago" in rows[0]
    assert len(render_top(data, limit=1, now=100.0).splitlines()) == 6


def test_format_message_one_line_per_entry() -> None:
    msg = Message(
        instance="i",
        seq=3,
        ts=1.5,
        hot=(HotEntry(key=b"k", rate=2.0, rule="r", ttl_ms=100, since=1.0),),
        cool=(CoolEntry(key=b"c", rule="r"),),
        final=True,
    )
    lines = format_message(msg)
    assert len(lines) == 2 and "HOT  k" in lines[0] and "[final]" in lines[0]
    assert "COOL c" in lines[1]
    assert format_message(Message(instance="i", seq=1, ts=0.0))[0].endswith("(no changes)")


def _connections_received(client: redis.Redis) -> int:
    return int(client.info("stats")["total_connections_received"])


def test_top_reader_reuses_one_connection_across_refreshes(
    shared_redis: RedisServer, unique: str
) -> None:
    """`top --watch` used to build a new Redis client (and connection) every refresh."""
    probe = redis.Redis.from_url(shared_redis.url)
    with TopReader(shared_redis.url, namespace=f"ns{unique}") as reader:
        assert reader.read()["hot"] == []
        before = _connections_received(probe)
        for _ in range(3):
            reader.read()
        assert _connections_received(probe) - before <= 1  # the probe's own INFO only


def test_top_reader_over_http_names_a_dead_endpoint() -> None:
    reader = TopReader("redis://unused", http=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(UnreachableError, match="cannot reach"):
        reader.read()


def test_check_http_rejects_a_non_http_url() -> None:
    with pytest.raises(ConfigError, match="http://"):
        check_http("notaurl")


def test_heartbeat_check_reads_without_writing(shared_redis: RedisServer, unique: str) -> None:
    client = redis.Redis.from_url(shared_redis.url)
    ns = Namespace(prefix=f"ns{unique}")
    assert newest_heartbeat(client, ns) is None
    with pytest.raises(HotkeydError, match="no hotkeyd instance"):
        check_heartbeat(client, ns, max_age=5)
    client.zadd(ns.instances, {"a": 100.0, "b": 90.0})
    clock = ManualClock(start=0.0, epoch=102.0)
    assert check_heartbeat(client, ns, max_age=5, clock=clock) == "ok: heartbeat 2.0s ago"
    with pytest.raises(HotkeydError, match="old"):
        check_heartbeat(client, ns, max_age=1, clock=clock)
    assert client.zcard(ns.instances) == 2  # nothing pruned: a read-only user can check


def test_follow_channel_fails_fast_when_redis_is_down() -> None:
    client = redis.Redis(port=free_port())
    with pytest.raises(UnreachableError):
        follow_channel(client, "ch", lambda d: None, where="redis://u:S3CRET@127.0.0.1:1/0")


def _pubsub_clients(client: redis.Redis) -> int:
    return sum(1 for c in client.client_list() if c.get("cmd") in ("subscribe", "ssubscribe"))


def test_follow_channel_reconnects_with_backoff_and_closes_old_pubsub(
    redis_server: RedisServer, unique: str
) -> None:
    channel = f"ch:{unique}"
    client = redis.Redis.from_url(redis_server.url)
    admin = redis.Redis.from_url(redis_server.url)
    got: list[bytes | str] = []
    notices: list[str] = []
    delays: list[float] = []

    def sleep(d: float) -> None:
        delays.append(d)
        time.sleep(0.05)

    seen: list[int] = []
    t = threading.Thread(
        target=lambda: seen.append(
            follow_channel(
                client,
                channel,
                got.append,
                count=2,
                notice=notices.append,
                backoff=Backoff(base=0.2, cap=1.0),
                sleep=sleep,
                where=redis_server.url,
            )
        ),
        daemon=True,
    )
    t.start()
    deadline = time.monotonic() + 10
    while admin.pubsub_numsub(channel)[0][1] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    admin.publish(channel, b"one")
    while not got:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    admin.client_kill_filter(_type="pubsub")
    while not any("reconnected" in n for n in notices):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert delays and 0.1 <= delays[0] <= 0.2  # Backoff's first delay, jittered
    assert _pubsub_clients(admin) == 1  # the lost pubsub is not left behind
    while admin.pubsub_numsub(channel)[0][1] < 1:
        time.sleep(0.02)
    admin.publish(channel, json.dumps({"n": 2}))
    t.join(10)
    assert seen == [2] and got[0] == b"one"


def test_render_top_shows_the_share_served_from_app_caches() -> None:
    data = {
        "instances": ["i1", "i2"],
        "hot": [{"key": "hot:1", "rate": 900.0, "rule": "r", "since": 95.0}],
        "top": [
            {"key": "hot:1", "rate": 4000.0, "local": 3960.0, "rule": "r", "hot": True},
            {"key": "cold:1", "rate": 50.0, "rule": "default"},
        ],
    }
    lines = render_top(data, limit=10, now=100.0).splitlines()
    assert "demand: 4050.0/s, 98% served from app caches" in lines[0]
    assert lines[2].split()[:3] == ["KEY", "RATE/s", "LOCAL%"]
    # the hot row shows the current total demand, not the rate it was announced with
    assert lines[3].split()[:3] == ["*hot:1", "4000.0", "99%"]
    assert lines[4].split()[:3] == ["cold:1", "50.0", "-"]


def test_merged_snapshots_sum_the_local_rate_per_key() -> None:
    from hotkeyd.client.snapshots import merge_snapshots

    def snap(instance: str, local: object) -> Message:
        top = ({"key": "k", "rate": 100.0, "local": local, "rule": "r", "hot": True},)
        return Message(instance=instance, seq=1, ts=1.0, full=True, top=top)

    merged = merge_snapshots({"a": snap("a", 60.0), "b": snap("b", 30.0)}).to_json(now=0.0)
    assert merged["top"][0]["rate"] == 200.0 and merged["top"][0]["local"] == 90.0
    forged = merge_snapshots({"a": snap("a", "lots"), "b": snap("b", -5)}).to_json(now=0.0)
    assert "local" not in forged["top"][0]
