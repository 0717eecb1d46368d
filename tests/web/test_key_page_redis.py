"""A key's page with Redis: the demand each app reported, and every daemon that announced it.

Two real daemons (stdin sources) publish to one real Redis; an app's demand report goes
to daemon A's demand channel. A's key page lists the app's last report for the key, and
both instances as announcers (read from their snapshots in Redis, not from A's memory).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from contextlib import ExitStack
from typing import Any

import redis

from hotkeyd.protocol.demand import DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer

KEY = b"product:7"


def _key_doc(d: DaemonProcess, key: bytes) -> dict[str, Any]:
    kid = base64.urlsafe_b64encode(key).decode().rstrip("=")
    with urllib.request.urlopen(d.url(f"/api/key?k={kid}&db=0"), timeout=5) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


def test_key_page_shows_each_apps_demand_and_every_announcer(
    shared_redis: RedisServer, ns: Namespace
) -> None:
    r = redis.Redis.from_url(shared_redis.url)
    with ExitStack() as stack:
        common = ["--window", "1", "--input-format", "keys", "--demand-reports"]
        common += ["--redis-url", shared_redis.url, "--namespace", ns.prefix]
        daemons = [
            stack.enter_context(DaemonProcess(*common, "--instance", name))
            for name in ("web-a", "web-b")
        ]
        feeders = [threading.Thread(target=d.feed_rate, args=({KEY: 3000.0}, 3.0)) for d in daemons]
        for f in feeders:
            f.start()
        a = daemons[0]
        try:
            deadline = time.monotonic() + 10
            doc = _key_doc(a, KEY)
            while time.monotonic() < deadline and doc["instances"] != ["web-a", "web-b"]:
                time.sleep(0.3)
                doc = _key_doc(a, KEY)
            assert doc["instances"] == ["web-a", "web-b"], doc
            assert doc["instances_from"] == "snapshots"
            for seq, n in enumerate((40, 250), 1):  # the last report of the app is kept
                report = DemandReport("checkout-svc", seq, time.time(), 250, (DemandEntry(KEY, n),))
                r.publish(ns.demand_channel("web-a"), report.dumps())
            while time.monotonic() < deadline and [x["n"] for x in doc["demand"]] != [250]:
                time.sleep(0.2)
                doc = _key_doc(a, KEY)
        finally:
            for f in feeders:
                f.join()
        (app,) = doc["demand"]
        assert app["app"] == "checkout-svc" and app["n"] == 250 and app["rate"] == 1000.0
        assert not any("demand per app" in c for c in doc["cannot_show"])
        assert any("demand reported to other instances" in c for c in doc["cannot_show"])
        assert not any("without Redis" in c for c in doc["cannot_show"])
        # daemon B heard no report: its page says it has none for the key
        assert _key_doc(daemons[1], KEY)["demand"] == []
    r.close()
