"""The web console against a real daemon: security over HTTP, and a real headless Chromium.

One daemon (stdin source, no Redis) and one headless Chromium, driven in real time over
the DevTools protocol (:mod:`hotkeyd.testing.browser`), are shared by the module, a tab
per test. The DOM the page built is checked (the hot key is there, hostile keys are text:
no element came from a key, the key page opens, the history shows the cooled interval),
and so is what the page records of itself in ``window.__hotkeydPerf``: a refresh each
second, 1,000 rows, and when a new hot key first appeared.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotkeyd.errors import ConfigError
from hotkeyd.testing import DaemonProcess
from hotkeyd.testing.browser import Chromium, chromium_binary
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
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    rules = tmp_path_factory.mktemp("web") / "rules.toml"
    rules.write_text("[default]\nthreshold = 20\n")  # 1,000 keys at 40/s are all hot
    with DaemonProcess(
        "--window", "1", "--input-format", "keys", "--rules", str(rules),
        "--max-hot", "2000", "--k", "2000", "--memory", str(8 << 20),
    ) as d:  # fmt: skip
        d.discard_stdout()
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


CHROMIUM = chromium_binary()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed (make servers)"
)
# The 2 s of issue 28 (a key on the page within 2 s of its announcement) is what the page
# is built for: it polls each second and the daemon's Now document is at most 0.5 s old,
# so the bound by design is 1.5 s plus one fetch. The test allows 1 s more than the 2 s,
# because CI runs eight jobs on two cores (a starved renderer misses a poll); the figure
# itself is in benchmarks/results/console.txt.
ANNOUNCE_TO_PAGE_S = 2.0
CI_LOAD_MARGIN_S = 1.0


def _ident(key: bytes, db: int = 0) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=") + f"/{db}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    """One headless Chromium for the module (real time, over DevTools); a tab per test."""
    with Chromium() as b:
        yield b


@needs_chromium
def test_browser_shows_hot_key_inert_and_key_page(daemon: DaemonProcess, browser: Chromium) -> None:
    feeder = threading.Thread(
        target=_feed_hot, args=(daemon, [b"product:42", HOSTILE, LONG, BINARY], 2.5)
    )
    feeder.start()  # hot again, whatever time the tests before took
    page = browser.page(daemon.url("/#/now"))
    try:
        page.wait_for(f"__hotkeydPerf.shownAt.has({_ident(BINARY)!r})", timeout=10)
    finally:
        feeder.join()
    dom = page.html()
    # the hostile key is text inside a cell: escaped in the DOM, no element made of it
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert '<img src="x"' not in dom and dom.count("<script") == 1
    assert page.eval("document.title") == "hotkeyd console"
    assert "k" * 1024 in dom
    assert f'class="hex">{BINARY.hex()}<' in dom  # a binary key, shown as hex
    kid = _ident(b"product:42")
    page.goto(daemon.url(f"/#/key/{kid}"))
    page.wait_for("document.getElementById('key-title').textContent === 'product:42'")
    page.wait_for("document.querySelector('#key-chart polyline') !== null")
    cannot = page.eval("document.getElementById('key-cannot').textContent")
    assert "without Redis only this daemon is known" in cannot
    assert "takes no demand reports" in cannot
    page.close()


@needs_chromium
def test_page_refreshes_each_second_and_shows_a_new_key_within_2s(
    daemon: DaemonProcess, browser: Chromium
) -> None:
    page = browser.page(daemon.url("/#/now"))
    page.wait_for("window.__hotkeydPerf.renders > 0")
    r0, ts0 = page.eval("[__hotkeydPerf.renders, __hotkeydPerf.ts]")
    ident = _ident(b"flash:1")
    feeder = threading.Thread(target=_feed_hot, args=(daemon, [b"flash:1"], 4.0))
    feeder.start()
    try:
        page.wait_for(f"__hotkeydPerf.shownAt.has({ident!r})", timeout=10)
    finally:
        feeder.join()
    shown = page.eval(f"__hotkeydPerf.shownAt.get({ident!r})") / 1000.0
    doc = json.loads(_req(daemon.url("/api/now"))[2])
    since = next(r["since"] for r in doc["rows"] if r["key"] == "flash:1")  # announced then
    delay = shown - since
    assert delay < ANNOUNCE_TO_PAGE_S + CI_LOAD_MARGIN_S, f"shown {delay:.2f} s after announced"
    # updates at least once a second: each refresh a newer document
    r1, ts1 = page.eval("[__hotkeydPerf.renders, __hotkeydPerf.ts]")
    assert r1 - r0 >= 3 and ts1 - ts0 >= 3.0, (r0, r1, ts0, ts1)
    assert (r1 - r0) / (ts1 - ts0) > 0.75  # about one refresh per second, each new
    page.close()


@needs_chromium
def test_thousand_hot_keys_render_and_refreshes_are_recorded(
    daemon: DaemonProcess, browser: Chromium
) -> None:
    keys = [f"item:{i:04d}".encode() for i in range(1000)]
    page = browser.page(daemon.url("/#/now"))
    feeder = threading.Thread(target=daemon.feed_rate, args=(dict.fromkeys(keys, 40.0), 3.0))
    feeder.start()
    try:
        page.wait_for("document.querySelectorAll('#now-rows > div').length >= 1000", timeout=15)
        n0 = page.eval("__hotkeydPerf.renders")
        page.wait_for(f"__hotkeydPerf.renders >= {n0 + 1}", timeout=5)
    finally:
        feeder.join()
    perf = page.eval("({rows: __hotkeydPerf.rows, ms: __hotkeydPerf.ms, n: __hotkeydPerf.renders})")
    assert perf["rows"] >= 1000
    assert len(perf["ms"]) == perf["n"] and all(v >= 0 for v in perf["ms"])  # one per refresh
    page.close()


@needs_chromium
def test_browser_history_shows_interval_after_cooling(
    daemon: DaemonProcess, browser: Chromium
) -> None:
    deadline = time.monotonic() + 15
    done: list[dict[str, object]] = []
    while time.monotonic() < deadline and not done:
        doc = json.loads(_req(daemon.url("/api/history"))[2])
        done = [iv for iv in doc["intervals"] if iv["key"] == "product:42" and iv["end"]]
        time.sleep(0.5)
    assert done, "product:42 never cooled"
    page = browser.page(daemon.url("/#/history"))
    page.wait_for(
        "document.getElementById('history-summary').textContent.includes('interval(s) of')"
    )
    assert ">product:42</a>" in page.html()
    page.close()
    status, headers, body = _req(daemon.url("/api/history?format=csv"))
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    lines = body.decode().splitlines()
    assert len(lines) == len(set(lines))  # de-duplicated
