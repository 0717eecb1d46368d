"""A real headless Chromium driven over the DevTools protocol, with a real clock.

``chromium --dump-dom`` only renders under ``--virtual-time-budget``, where
``performance.now`` does not advance and the page's timers fire in virtual time; this
runs Chromium with ``--remote-debugging-port=0`` instead and talks to it over one
WebSocket (a minimal RFC 6455 client on the standard library: text frames, masking,
fragments, ping), so pages run in wall-clock time and their own timings are real::

    with Chromium() as browser:
        page = browser.page("http://127.0.0.1:9108/#/now")
        page.wait_for("document.querySelectorAll('#now-rows tr').length > 0")
        print(page.eval("window.__hotkeydPerf.renders"))

One browser serves many pages (tabs), so a test module starts Chromium once. Debian's
``chromium`` package is what it runs (``make servers``); Playwright is not needed.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hotkeyd.errors import HotkeydError

__all__ = ["BrowserError", "Chromium", "Page", "chromium_binary"]


class BrowserError(HotkeydError, RuntimeError):
    """Chromium did not start, a DevTools command failed, or a wait timed out."""


def chromium_binary() -> str | None:
    """The Chromium on PATH (Debian's ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _WebSocket:
    """The client side of one WebSocket: enough of RFC 6455 for DevTools."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), timeout)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        self.sock.sendall(
            (
                f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode("ascii")
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BrowserError("DevTools closed the WebSocket handshake")
            head += chunk
        status, _, self._buf = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n", 1)[0] + b" ":
            raise BrowserError(f"DevTools refused the WebSocket: {status[:80]!r}")

    def send(self, text: str) -> None:
        data = text.encode("utf-8")
        n = len(data)
        head = bytes([0x81])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(head + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise BrowserError("DevTools closed the WebSocket")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def recv(self) -> str:
        """The next text message (fragments joined; pings answered)."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            mask = self._read(4) if b1 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise BrowserError("DevTools closed the WebSocket")
            if opcode == 0x9:  # ping: answer with the same payload
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode("utf-8")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(bytes([0x88, 0x80]) + b"\0\0\0\0")
        self.sock.close()


class Chromium:
    """One headless Chromium process and its DevTools connection.

    Args:
        binary: the Chromium to run (default: :func:`chromium_binary`).
        window: the viewport size, ``(width, height)`` (screenshots have it).
        timeout: seconds to wait for Chromium to start and for each command.
    """

    def __init__(
        self,
        binary: str | None = None,
        window: tuple[int, int] = (1200, 700),
        timeout: float = 30.0,
    ) -> None:
        self.binary = binary or chromium_binary()
        self.window = window
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._ws: _WebSocket | None = None
        self._ids = itertools.count(1)
        self._profile: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> Chromium:
        if self.binary is None:
            raise BrowserError("chromium is not installed (make servers)")
        self._profile = tempfile.TemporaryDirectory(
            prefix="hotkeyd-chromium-", ignore_cleanup_errors=True
        )
        w, h = self.window
        self.proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
             "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self._profile.name}", f"--window-size={w},{h}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while True:
            lines = port_file.read_text().split("\n") if port_file.exists() else []
            if len(lines) >= 2 and lines[1].strip():
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise BrowserError("chromium did not open its DevTools port")
            time.sleep(0.05)
        self._ws = _WebSocket(f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}", self.timeout)
        return self

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> Any:
        """Run one DevTools command and return its result (events in between are dropped)."""
        if self._ws is None:
            raise BrowserError("chromium is not started")
        ident = next(self._ids)
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        self._ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})

    def page(self, url: str) -> Page:
        """A new tab showing ``url`` (loaded: its ``load`` event has fired)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, target, session)
        page.goto(url)
        return page


class Page:
    """One tab of a :class:`Chromium`."""

    def __init__(self, browser: Chromium, target: str, session: str) -> None:
        self.browser = browser
        self.target = target
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.browser.send(method, params, self.session)

    def goto(self, url: str) -> None:
        """Navigate and wait for the document to be complete."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        res = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression[:60]}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0, every: float = 0.02) -> float:
        """Wait until ``expression`` is truthy; the monotonic time it first was."""
        deadline = time.monotonic() + timeout
        while True:
            if self.eval(expression):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout} s waiting for {expression[:80]}")
            time.sleep(every)

    def screenshot(self, path: str | os.PathLike[str]) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def html(self) -> str:
        """The DOM as HTML (what ``--dump-dom`` prints)."""
        return str(self.eval("document.documentElement.outerHTML"))

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})
