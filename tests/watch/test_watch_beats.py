"""The watch's heartbeats (issue 27 made them cheap): each beat's body follows the watch's
state, beats survive a bus connection the server closed, and a half-open watch
connection still stops them. In process, against a real redis-server."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis

from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from hotkeyd.watch import Watch

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "spec" / "schema" / "watch-heartbeat-v1.json")
    .read_text()
)  # fmt: skip


@pytest.fixture
def watch(redis_server: RedisServer) -> Iterator[Watch]:
    w = Watch(
        [redis_server.url], redis_server.url, namespace=Namespace("beats"), origin="t",
        auth=None, metrics=Metrics(),
    ).start()  # fmt: skip
    try:
        yield w
    finally:
        w.close()


def _beats(sub: Any, seconds: float) -> list[dict[str, Any]]:
    out, t0 = [], time.monotonic()
    while time.monotonic() - t0 < seconds:
        m = sub.get_message(timeout=0.05)
        if m and m["type"] == "message":
            out.append(json.loads(m["data"]))
    return out


def _clients(r: redis.Redis) -> list[dict[str, str]]:
    lines = r.execute_command("CLIENT", "LIST", "TYPE", "normal").decode().splitlines()
    return [dict(kv.split("=", 1) for kv in line.split()) for line in lines]


@pytest.fixture
def apart() -> Iterator[tuple[RedisServer, Watch]]:
    """A watch whose data node is not the bus: beats go on the bus's own connection."""
    with RedisServer() as data, RedisServer() as bus:
        w = Watch(
            [data.url], bus.url, namespace=Namespace("beats"), origin="t", auth=None,
            metrics=Metrics(),
        ).start()  # fmt: skip
        try:
            yield bus, w
        finally:
            w.close()


def test_beats_follow_the_state_and_survive_a_closed_bus_connection(
    apart: tuple[RedisServer, Watch],
) -> None:
    bus, watch = apart
    r = redis.Redis.from_url(bus.url)
    sub = r.pubsub()
    sub.subscribe("beats:watch")
    try:
        first = _beats(sub, 0.35)
        assert first and first[-1]["keys"] == 0 and first[-1]["armed"] == 0, first
        watch.set_hot([b"k:1", b"k:2"], seq=7)
        later = _beats(sub, 0.35)
        for _ in range(8):  # a loaded box may take a few beats to arm
            if later[-1]["keys"] == 2 and later[-1]["armed"] == 7:
                break
            later += _beats(sub, 0.25)
        assert later[-1]["keys"] == 2 and later[-1]["armed"] == 7, later
        for b in first + later:
            jsonschema.validate(b, SCHEMA)
            assert b["up"] is True and b["epoch"] == 1 and b["node"] == watch.nodes[0].node
        assert sorted(b["ts"] for b in later) == [b["ts"] for b in later]
        # The server closes every connection but the tracking one and ours: the bus's
        # own connection goes, and the beats continue on a fresh one (same epoch).
        killed = 0
        for f in _clients(r):
            if "t" not in f["flags"] and f["cmd"] == "publish":
                r.execute_command("CLIENT", "KILL", "ID", f["id"])
                killed += 1
        assert killed == 1
        after = _beats(sub, 0.5)
        assert len(after) >= 3, after  # one beat may be lost, never the lease (300 ms)
        gaps = [b["ts"] - a["ts"] for a, b in itertools.pairwise(after)]
        assert max(gaps) < 0.3, gaps
        assert after[-1]["epoch"] == 1 and after[-1]["keys"] == 2
    finally:
        sub.close()
        r.close()


def test_on_the_bus_node_beats_ride_the_tracking_connection(
    redis_server: RedisServer, watch: Watch
) -> None:
    """Data node == bus (the default): each beat's PUBLISH follows the PING on the
    tracking connection, in one write; no other connection publishes. Killing that
    connection starts a new epoch, and the beats resume on the new one."""
    r = redis.Redis.from_url(redis_server.url)
    sub = r.pubsub()
    sub.subscribe("beats:watch")
    try:
        assert _beats(sub, 0.35), "no heartbeat"
        publishers = [f for f in _clients(r) if f["cmd"] == "publish"]
        assert [("t" in f["flags"]) for f in publishers] == [True], publishers
        tracking = publishers[0]

        def calls() -> tuple[int, int]:
            st = r.info("commandstats")
            return st["cmdstat_ping"]["calls"], st["cmdstat_publish"]["calls"]

        p0, q0 = calls()
        time.sleep(0.5)
        p1, q1 = calls()
        assert q1 - q0 >= 3 and abs((p1 - p0) - (q1 - q0)) <= 1, (p1 - p0, q1 - q0)
        r.execute_command("CLIENT", "KILL", "ID", tracking["id"])
        after = _beats(sub, 0.6)
        assert after and after[-1]["epoch"] == 2 and after[-1]["up"] is True, after
        now = [f for f in _clients(r) if "t" in f["flags"]]
        assert len(now) == 1 and now[0]["id"] != tracking["id"], now
    finally:
        sub.close()
        r.close()


def test_a_frozen_watch_node_stops_the_beats() -> None:
    """The PING still precedes every beat: a node that does not answer (a half-open
    connection looks the same) gets no heartbeats, so strict apps stop serving."""
    with RedisServer() as data, RedisServer() as bus:
        w = Watch(
            [data.url], bus.url, namespace=Namespace("beats"), origin="t", auth=None,
            metrics=Metrics(),
        ).start()  # fmt: skip
        b = redis.Redis.from_url(bus.url)
        sub = b.pubsub()
        sub.subscribe("beats:watch")
        try:
            assert _beats(sub, 0.3), "no heartbeat"
            frozen = redis.Redis.from_url(data.url)
            frozen.execute_command("CLIENT", "PAUSE", "1000", "ALL")
            time.sleep(0.15)  # a beat already past its PING may still arrive
            assert _beats(sub, 0.6) == []
            assert _beats(sub, 1.0), "the beats did not resume after the pause"
            frozen.close()
        finally:
            sub.close()
            b.close()
            w.close()
