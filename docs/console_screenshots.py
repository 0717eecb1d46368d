"""Regenerate docs/console-*.png: a scripted daemon run and headless Chromium.

A real redis-server and two daemons (stdin sources) of one namespace; an app reports the
reads it served locally of ``product:42`` to the first. Chromium (real time, over the
DevTools protocol) opens each view of the first daemon once it shows its data and takes
a screenshot: Now, a key's page, History (after a key cooled), Health.

make docs
"""

from __future__ import annotations

import base64
import sys
import threading
import time
from pathlib import Path

import redis

from hotkeyd.protocol.demand import DemandEntry, DemandReport
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from hotkeyd.testing.browser import Chromium, Page, chromium_binary

OUT = Path(__file__).resolve().parent
KEY = b"product:42"


def _text_of(page: Page, element: str, needle: str) -> None:
    page.wait_for(f"document.getElementById({element!r}).textContent.includes({needle!r})", 20)
    time.sleep(0.3)  # the frame after the update


def main() -> int:
    if chromium_binary() is None:
        print("chromium is not installed (make servers)", file=sys.stderr)
        return 1
    ns = Namespace(prefix="docs")
    with RedisServer() as rs, Chromium(window=(1200, 700)) as browser:
        common = ["--window", "1", "--redis-url", rs.url, "--namespace", ns.prefix]
        with (
            DaemonProcess(*common, "--instance", "hotkeyd-a") as a,
            DaemonProcess(*common, "--instance", "hotkeyd-b") as b,
        ):
            a.discard_stdout()
            b.discard_stdout()
            r = redis.Redis.from_url(rs.url)
            feed = {KEY: 4000.0, b"cart:7": 2500.0, b"user:\xff\xfe": 2000.0}
            a.feed_rate({**feed, b"<script>alert(1)</script>": 3000.0}, 3.0)  # cools later
            feeders = [
                threading.Thread(target=a.feed_rate, args=(feed, 15.0)),
                threading.Thread(target=b.feed_rate, args=({KEY: 1500.0}, 15.0)),
            ]
            for f in feeders:
                f.start()
            try:
                time.sleep(3.0)
                page = browser.page(a.url("/#/now"))
                _text_of(page, "now-rows", "cart:7")
                page.screenshot(OUT / "console-now.png")
                for seq, app in enumerate(("checkout-svc", "search-svc"), 1):
                    entry = DemandEntry(KEY, 300 * seq)
                    report = DemandReport(app, seq, time.time(), 250, (entry,))
                    r.publish(ns.demand_channel("hotkeyd-a"), report.dumps())
                kid = base64.urlsafe_b64encode(KEY).decode().rstrip("=")
                page.goto(a.url(f"/#/key/{kid}/0"))
                _text_of(page, "key-facts", "hotkeyd-b")
                _text_of(page, "key-demand", "search-svc")
                page.send(  # taller: the demand table and the intervals below the chart
                    "Emulation.setDeviceMetricsOverride",
                    {"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                )
                time.sleep(0.3)
                page.screenshot(OUT / "console-key.png")
                page.send("Emulation.clearDeviceMetricsOverride")
                page.goto(a.url("/#/history"))
                _text_of(page, "history-rows", "<script>")
                page.screenshot(OUT / "console-history.png")
                page.goto(a.url("/#/health"))
                _text_of(page, "health-metrics", "hotkeyd_")
                page.screenshot(OUT / "console-health.png")
            finally:
                for f in feeders:
                    f.join()
            r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
