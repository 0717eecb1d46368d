"""End to end: ``hotkeyd run`` taps a real Redis with MONITOR and publishes the hot key."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.protocol.wire import Message
from hotkeyd.testing import DaemonProcess, RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server(any_redis_server: RedisServer) -> RedisServer:
    """Every test here runs on redis-server and on valkey-server."""
    return any_redis_server


def test_daemon_publishes_hot_key_seen_through_monitor(
    redis_server: RedisServer, shared_redis: RedisServer, unique: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("[default]\nthreshold = 300\nttl = 2.0\ncooldown = 1.0\n")
    channel = f"hk-e2e-{unique}"
    sub = redis.Redis(port=shared_redis.port).pubsub()
    sub.subscribe(channel)
    daemon = DaemonProcess(
        "--source", f"redis-monitor://127.0.0.1:{redis_server.port}",
        "--redis-url", f"redis://127.0.0.1:{shared_redis.port}/0",
        "--channel", channel,
        "--namespace", f"hk{unique}",
        "--rules", str(rules),
        "--no-http",
        http=False, stdin=False, log_level=None,
    ).start()  # fmt: skip
    background = subprocess.Popen(
        ["redis-benchmark", "-p", str(redis_server.port), "-q", "-t", "get,set",
         "-r", "1000000", "-n", "100000000", "-c", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    app = redis.Redis(port=redis_server.port)
    hot: list[object] = []
    try:
        deadline = time.monotonic() + 30
        while not hot and time.monotonic() < deadline:
            assert daemon.running, daemon.stderr
            for _ in range(200):
                app.get("hot:e2e")
            msg = sub.get_message(timeout=0.01)
            while msg is not None:
                if msg["type"] == "message":
                    m = Message.loads(msg["data"])
                    hot.extend(h for h in m.hot)
                msg = sub.get_message(timeout=0.0)
    finally:
        background.kill()
        background.wait()
        daemon.stop(10)
        sub.close()
    keys = {h.key for h in hot}  # type: ignore[attr-defined]
    assert b"hot:e2e" in keys, daemon.stderr
    assert keys == {b"hot:e2e"}  # no uniform background key crossed the threshold
