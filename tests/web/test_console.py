"""The web console against a real daemon: security over HTTP, and a real headless Chromium.

One daemon (stdin source, no Redis) is shared by the module; Chromium renders the page
with ``--dump-dom`` and the DOM it built is checked: the hot key is there, hostile keys
are text (no element came from a key), the key page opens.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotkeyd.errors import ConfigError
from hotkeyd.testing import DaemonProcess
from hotkeyd.web.security import Guard

HOSTILE = b"<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
BINARY = b"\xff\xfe\x00bin"  # not UTF-8: shown as hex
LONG = b"k" * 1024
TOKEN = "s3cret-console-token-0123"


def _req(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _feed_hot(d: DaemonProcess, keys: list[bytes], seconds: float = 3.0) -> None:
    d.feed_rate({k: 3000.0 for k in keys}, seconds)


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    with DaemonProcess("--window", "1", "--input-format", "keys") as d:
        _feed_hot(d, [b"product:42", HOSTILE, LONG, BINARY])
        yield d


def test_security_headers_and_host(daemon: DaemonProcess) -> None:
    status, headers, body = _req(daemon.url("/"))
    assert status == 200 and b'<script src="/static/console.js"' in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert "<script>" not in body.decode().replace(
        '<script src="/static/console.js" defer></script>', ""
    )
    status, _, _ = _req(daemon.url("/api/now"), {"Host": "evil.example:80"})
    assert status == 421
    status, _, _ = _req(daemon.url("/metrics"), {"Host": "evil.example"})
    assert status == 200  # /metrics unchanged


def test_now_document_escapes_nothing_it_needs_not(daemon: DaemonProcess) -> None:
    import json

    doc = json.loads(_req(daemon.url("/api/now"))[2])
    keys = {r["key"] for r in doc["rows"] if r["hot"]}
    assert {"product:42", HOSTILE.decode(), LONG.decode()} <= keys
    assert {"key": BINARY.hex(), "hex": True}.items() <= next(
        r for r in doc["rows"] if r.get("hex")
    ).items()


def test_token_guards_console_not_metrics(tmp_path: Path) -> None:
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    with DaemonProcess("--window", "1", "--console-token-file", str(tf)) as d:
        assert _req(d.url("/api/now"))[0] == 401
        assert _req(d.url("/"), {"Authorization": "Bearer wrong-token-wrong-token"})[0] == 401
        assert _req(d.url("/api/now"), {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
        assert _req(d.url("/"), {"Authorization": f"Basic {basic}"})[0] == 200
        assert _req(d.url("/metrics"))[0] == 200
        assert _req(d.url("/healthz"))[0] == 200
        d.stop()
        assert TOKEN not in d.stderr


def test_off_loopback_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="console-token-file"):
        Guard("0.0.0.0")
    assert Guard("0.0.0.0", TOKEN).needs_auth
    assert not Guard("127.0.0.1").host_ok("attacker.example:9108")
    assert Guard("127.0.0.1").host_ok("localhost:9108")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _dump(url: str, budget_ms: int = 2500) -> str:
    assert CHROMIUM is not None
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout.decode("utf-8", "replace")


def _dump_showing(url: str, needle: str, within: float = 30.0) -> str:
    """The page's DOM once it shows ``needle``: on a loaded machine Chromium's first
    render can come before the page's first poll answered, so it renders again."""
    deadline = time.monotonic() + within
    while True:
        dom = _dump(url)
        if needle in dom or time.monotonic() > deadline:
            return dom


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make servers)")
def test_browser_shows_hot_key_inert_and_key_page(daemon: DaemonProcess) -> None:
    started = time.monotonic()
    dom = _dump_showing(daemon.url("/#/now"), "product:42")
    assert "product:42" in dom
    # the hostile key is text inside a cell: escaped in the DOM, no element made of it
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert '<img src="x"' not in dom and dom.count("<script") == 1
    assert "<title>hotkeyd console</title>" in dom
    assert "k" * 1024 in dom
    assert f'class="hex">{BINARY.hex()}<' in dom  # a binary key, shown as hex
    kid = base64.urlsafe_b64encode(b"product:42").decode().rstrip("=")
    page = _dump_showing(daemon.url(f"/#/key/{kid}/0"), ">product:42</h1>")
    assert ">product:42</h1>" in page
    assert "<polyline" in page
    assert time.monotonic() - started < 30


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make servers)")
def test_browser_history_shows_interval_after_cooling(daemon: DaemonProcess) -> None:
    import json

    deadline = time.monotonic() + 15
    done: list[dict[str, object]] = []
    while time.monotonic() < deadline and not done:
        doc = json.loads(_req(daemon.url("/api/history"))[2])
        done = [iv for iv in doc["intervals"] if iv["key"] == "product:42" and iv["end"]]
        time.sleep(0.5)
    assert done, "product:42 never cooled"
    dom = _dump_showing(daemon.url("/#/history"), ">product:42</a>")
    assert "interval(s) of" in dom and ">product:42</a>" in dom
    status, headers, body = _req(daemon.url("/api/history?format=csv"))
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    lines = body.decode().splitlines()
    assert len(lines) == len(set(lines))  # de-duplicated
