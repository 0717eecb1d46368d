"""Regenerate docs/console-*.png: a scripted run of the daemon and headless Chromium.

make docs
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

from hotkeyd.testing import DaemonProcess

OUT = Path(__file__).resolve().parent


def shot(chromium: str, url: str, name: str) -> None:
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--window-size=1200,700", "--virtual-time-budget=2500",
         f"--screenshot={OUT / name}", url],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium is not installed (make servers)", file=sys.stderr)
        return 1
    with DaemonProcess("--window", "1") as d:
        d.feed_rate({b"product:42": 4000.0, b"cart:7": 2500.0, b"user:\xff\xfe": 2000.0}, 4.0)
        d.feed_rate({b"product:42": 4000.0, b"<script>alert(1)</script>": 3000.0}, 3.0)
        shot(chromium, d.url("/#/now"), "console-now.png")
        kid = base64.urlsafe_b64encode(b"product:42").decode().rstrip("=")
        shot(chromium, d.url(f"/#/key/{kid}/0"), "console-key.png")
        shot(chromium, d.url("/#/history"), "console-history.png")
        shot(chromium, d.url("/#/health"), "console-health.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
