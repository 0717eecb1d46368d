"""The one harness that runs the real daemon: ``python -m hotkeyd run`` as a subprocess.

A test talks to it as a user would: lines on stdin (when it reads them), its HTTP
endpoint on a free port (``/healthz``, ``/metrics``, ``/topk``), signals, and its exit
code and stderr::

    with DaemonProcess("--redis-url", rs.url, "--window", "1") as d:
        d.feed(b"product:1\\n" * 5000)
        assert d.metric("hotkeyd_keys_hot") >= 1

:func:`run_daemon` runs it to its end instead (a one-shot: ``--print-config``, a finite
input, a failure at start).
"""

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
from typing import Any, TypeVar

from hotkeyd.testing._server import free_port

__all__ = ["DaemonProcess", "run_daemon"]

_D = TypeVar("_D", bound="DaemonProcess")


def run_daemon(
    *args: str,
    input: bytes | str | None = None,
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
    text: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``hotkeyd run *args`` to its end, output captured: a one-shot (``--print-config``,
    a finite input on stdin, a failure at start)."""
    return subprocess.run(
        [sys.executable, "-m", "hotkeyd", "run", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        text=text,
    )


class DaemonProcess:
    """``hotkeyd run *args`` in a subprocess, with its HTTP endpoint on a free port.

    Args:
        args: options after ``run`` (``--http-port`` and ``--log-level`` are added).
        env: variables added to this process's environment.
        cwd: working directory of the daemon.
        stdin: give the daemon a pipe on stdin (for :meth:`feed`); else it inherits none.
        capture: pipe stdout (``proc.stdout``, the caller's to read) and stderr (read into
            :attr:`stderr`); else both are inherited.
        http: give it an HTTP port (``--http-port``) and wait for ``/healthz`` on start;
            else ``--no-http`` is the caller's to pass and start does not wait.
        log_level: ``--log-level`` of the daemon (None: its default).
    """

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        stdin: bool = True,
        capture: bool = True,
        http: bool = True,
        log_level: str | None = "INFO",
    ) -> None:
        self.http_port = free_port() if http else 0
        http_args = ["--http-port", str(self.http_port)] if http else []
        self.args = [
            sys.executable,
            "-m",
            "hotkeyd",
            "run",
            *http_args,
            *(["--log-level", log_level] if log_level else []),
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.http = http
        self.stdin = stdin
        self.capture = capture
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_lines: list[str] = []
        self._reader: threading.Thread | None = None

    def start(self: _D, wait: bool = True) -> _D:
        """Start the daemon; with ``wait`` (and HTTP), return once ``/healthz`` answers."""
        pipe = subprocess.PIPE if self.capture else None
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL,
            stdout=pipe,
            stderr=pipe,
            env=self.env,
            cwd=self.cwd,
        )
        if self.capture:
            self._reader = threading.Thread(target=self._drain, daemon=True)
            self._reader.start()
        if wait and self.http:
            self.wait_healthy()
        return self

    def __enter__(self: _D) -> _D:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the daemon if it still runs, and release its pipes."""
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

    def discard_stdout(self) -> None:
        """Read and drop the daemon's stdout in a thread (with ``capture``): the stdout
        publisher's lines of many hot keys would otherwise fill the pipe and stall it."""
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        threading.Thread(
            target=lambda: all(iter(lambda: out.read(1 << 16), b"")), daemon=True
        ).start()

    def _drain(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    @property
    def stderr(self) -> str:
        """Everything the daemon wrote on stderr so far (with ``capture``)."""
        return "".join(self.stderr_lines)

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while the daemon runs."""
        assert self.proc is not None
        return self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        """Wait for the daemon to exit by itself; its exit code."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.stderr}")
            try:
                with urllib.request.urlopen(self.url("/healthz"), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"daemon not healthy after {timeout}s: {self.stderr}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def get(self, path: str) -> str:
        """The body of ``GET path`` on the daemon's HTTP endpoint."""
        with urllib.request.urlopen(self.url(path), timeout=5) as resp:
            return str(resp.read().decode())

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
        return self.get("/metrics")

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
            return str(json.loads(self.get("/healthz")).get("status"))
        except urllib.error.HTTPError as exc:
            return str(json.loads(exc.read()).get("status"))

    def healthy(self) -> bool:
        try:
            return self.health() == "ok"
        except OSError:
            return False

    def topk(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.get("/topk"))
        return data

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0, force: bool = False) -> int:
        """SIGTERM, wait for the exit code (``force``: SIGKILL after ``timeout``), close."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if not force:
                raise
            self.proc.kill()
            code = self.proc.wait(5)
        self.close()
        return code
