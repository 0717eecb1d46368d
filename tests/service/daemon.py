"""Run ``hotkeyd run`` as a real subprocess and talk to it like a user would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import redis

from hotkeyd.testing import free_port
from hotkeyd.wire import Message


class Daemon:
    """``python -m hotkeyd run`` fed on stdin, with its HTTP endpoint on a free port."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.http_port = free_port()
        self.args = [
            sys.executable,
            "-m",
            "hotkeyd",
            "run",
            "--http-port",
            str(self.http_port),
            "--log-level",
            "INFO",
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_lines: list[str] = []
        self._reader: threading.Thread | None = None

    def __enter__(self) -> Daemon:
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.wait_healthy()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def _drain(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.stderr}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.http_port}/healthz", timeout=1
                ):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"daemon not healthy after {timeout}s: {self.stderr}")

    def feed(self, data: bytes) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def feed_rate(self, lines: dict[bytes, float], seconds: float, step: float = 0.05) -> None:
        """Write each key at its rate (per second) for ``seconds``, in ``step`` slices."""
        carry = dict.fromkeys(lines, 0.0)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            chunk = []
            for key, rate in lines.items():
                carry[key] += rate * step
                n = int(carry[key])
                carry[key] -= n
                chunk.append((key + b"\n") * n)
            self.feed(b"".join(chunk))
            time.sleep(max(0.0, step - (time.monotonic() - t0)))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            base, _, rest = head.partition("{")
            if base != name:
                continue
            if all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total

    def health(self) -> str:
        """The ``status`` /healthz reports (ok, degraded, unhealthy)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/healthz", timeout=5
            ) as r:
                return str(json.loads(r.read()).get("status"))
        except urllib.error.HTTPError as exc:
            return str(json.loads(exc.read()).get("status"))

    def topk(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/topk", timeout=5) as r:
            return json.loads(r.read())

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code


class Listener:
    """Collects every message on a channel, from a background thread."""

    def __init__(self, url: str, channel: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.channel = channel
        self.pubsub.subscribe(channel)
        self.messages: list[tuple[float, Message]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                m = self.pubsub.get_message(timeout=0.1)
            except redis.ConnectionError:
                time.sleep(0.1)
                try:
                    self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                    self.pubsub.subscribe(self.channel)
                except redis.ConnectionError:
                    pass
                continue
            if m and m.get("type") == "message":
                self.messages.append((time.monotonic(), Message.loads(m["data"])))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.pubsub.close()

    def hot_keys(self) -> list[bytes]:
        return [h.key for _, m in self.messages for h in m.hot if not m.full and not m.final]

    def cool_keys(self) -> list[bytes]:
        return [c.key for _, m in self.messages for c in m.cool]

    def wait_for(self, pred: Any, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.02)
        return bool(pred())
