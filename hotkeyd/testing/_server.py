"""Free ports and the start/stop lifecycle every throwaway server shares."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from types import TracebackType
from typing import TypeVar


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Block until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from None
            time.sleep(0.02)


_L = TypeVar("_L", bound="_Lifecycle")


class _Lifecycle:
    """``with thing:`` starts it and stops it."""

    def __enter__(self: _L) -> _L:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class _Server(_Lifecycle):
    proc: subprocess.Popen[bytes] | None = None
    port: int

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL), as a crash would."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(5)

    def restart(self, down_for: float = 0.0) -> None:
        """Stop, optionally stay down for ``down_for`` seconds, and start on the same port."""
        self.stop()
        if down_for:
            time.sleep(down_for)
        self.start()
