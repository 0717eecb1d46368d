"""Demand reports signed in Node and Java are what a daemon requiring signatures reads.

Issue 23: a daemon started with ``--demand-key-file`` reads only reports signed with a
reporter key. Each language's read app (``tests/interop/apps.py``) reads one key through
its own HotCache at 2,000 reads/s with ``HOTKEYD_DEMAND_KEY_FILE`` naming the key file;
the real ``hotkeyd run`` (MONITOR tap) must accept its reports (none ``unsigned``), and one
of them with a byte changed must be dropped as ``unsigned``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from tests.client.helpers import wait_until

from .apps import ReadApp

pytestmark = [pytest.mark.integration]

KEY = "product:1"


@pytest.mark.parametrize("lang", ["node", "java"])
def test_signed_reports_are_accepted_and_a_tampered_one_is_not(
    lang: str, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = Namespace(f"signed{lang}{os.getpid()}")
    keyfile = tmp_path / "demand.key"
    keyfile.write_bytes(b"reporter-key-for-apps-0123\nreporter-key-previous-0123\n")
    (tmp_path / "rules.toml").write_text("[default]\nthreshold = 1000\nttl = 2.0\n")
    args = ["-s", f"redis-monitor://127.0.0.1:{redis_server.port}", "--redis-url"]
    args += [redis_server.url, "--namespace", ns.prefix, "--instance", "d1", "--window", "1.0"]
    args += ["--rules", str(tmp_path / "rules.toml"), "--demand-key-file", str(keyfile)]
    daemon = DaemonProcess(*args, stdin=False, capture=False, log_level="warning")
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, b"v")
    channel = ns.demand_channel("d1")
    monkeypatch.setenv("HOTKEYD_DEMAND_KEY_FILE", str(keyfile))
    daemon.start()
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    app = ReadApp(lang, tmp_path, "--url", redis_server.url, "--key", KEY, "--rate", "2000",
                  "--namespace", ns.prefix, "--seconds", "120")  # fmt: skip
    try:
        app.wait_event(lambda e: e.get("event") == "ready", 60, "ready line")

        def accepted() -> float:
            return daemon.metric("hotkeyd_demand_reports_total")

        assert wait_until(lambda: accepted() >= 4, timeout=30), daemon.metrics()
        assert daemon.metric("hotkeyd_demand_reports_dropped_total", reason="unsigned") == 0
        report = None
        deadline = time.monotonic() + 5
        while report is None and time.monotonic() < deadline:
            msg = pubsub.get_message(timeout=0.5)
            if msg is not None and msg["type"] == "message":
                report = msg["data"]
        assert report is not None and b'"sig":"' in report, report
        tampered = report.replace(b'"type":"demand"', b'"type":"demand","x":1', 1)
        assert tampered != report
        r.publish(channel, tampered)
        assert wait_until(
            lambda: daemon.metric("hotkeyd_demand_reports_dropped_total", reason="unsigned") == 1
        )
    finally:
        app.kill()
        pubsub.close()
        daemon.stop()
        r.close()
