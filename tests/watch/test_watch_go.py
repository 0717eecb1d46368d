"""A Go app drops its copy of a hot key on a plain SET made by a non-SDK client: the
daemon's watch broadcasts the invalidation the Go SDK already decodes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess
from tests.interop.apps import ReadApp

from .test_watch import BOUND, _Load

pytestmark = pytest.mark.integration


def test_go_app_sees_a_direct_set(redis_server: RedisServer, tmp_path: Path) -> None:
    key = "item:go"
    data = redis.Redis.from_url(redis_server.url)
    data.set(key, "v0")
    with DaemonProcess("--redis-url", redis_server.url, "--window", "0.5") as d, _Load(
        d, {key.encode(): 3000.0}
    ):  # fmt: skip
        app = ReadApp("go", tmp_path, "--url", redis_server.url, "--key", key, "--rate", "2000")
        try:
            app.wait_event(lambda e: e.get("event") == "ready", 60, "ready line")
            app.wait_event(lambda e: e.get("event") == "stats" and e.get("hot"), 15, "hot key")
            time.sleep(0.3)
            for i in range(3):
                value = f"direct-{i}"
                wrote = time.time() * 1000.0
                data.set(key, value)  # not through the SDK
                _, seen = app.wait_event(
                    lambda e, v=value: e.get("event") == "value" and e.get("value") == v,
                    5,
                    "the directly written value",
                )
                lag = (seen["t"] - wrote) / 1000.0
                print(f"go app saw direct SET {i} after {lag * 1000:.2f} ms")
                assert lag < BOUND, lag  # without the watch: the key's TTL (seconds)
                time.sleep(0.1)
        finally:
            app.stop()
