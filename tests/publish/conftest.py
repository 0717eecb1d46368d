"""Helpers for publisher tests: subscribers, waiting, servers with extra arguments."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from hotkeyd.conn.redis import client_from_url
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Message
from hotkeyd.testing import RedisServer

IN_CI = bool(os.environ.get("CI"))


def wait_until(pred: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``pred`` until truthy; fail the test (not hang) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """Current value of one metric sample (0 when never touched)."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


class Subscriber:
    """A real redis-py subscriber that parses what arrives."""

    def __init__(self, url: str, channel: str) -> None:
        self.client = client_from_url(url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(channel)
        # wait for the subscribe confirmation so nothing published after this is missed
        deadline = time.monotonic() + 5
        while not self._confirmed():
            if time.monotonic() > deadline:
                raise TimeoutError("subscribe not confirmed")
            time.sleep(0.01)
        self.raw: list[bytes] = []

    def _confirmed(self) -> bool:
        channels = [c.decode() if isinstance(c, bytes) else c for c in self.pubsub.channels]
        return bool(self.client.pubsub_numsub(*channels)[0][1])

    def get(self, timeout: float = 5.0) -> Message:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.pubsub.get_message(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            if m is not None and m["type"] == "message":
                self.raw.append(m["data"])
                return Message.loads(m["data"])
        raise TimeoutError(f"no message within {timeout}s")

    def until(self, pred: Callable[[Message], bool], timeout: float = 10.0) -> list[Message]:
        """Collect messages until one satisfies ``pred`` (returned last)."""
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no matching message within {timeout}s; got {out!r}")
            try:
                msg = self.get(timeout=left)
            except TimeoutError:
                continue
            out.append(msg)
            if pred(msg):
                return out

    def close(self) -> None:
        try:
            self.pubsub.close()
        finally:
            self.client.close()


@pytest.fixture
def make_redis() -> Iterator[Callable[..., RedisServer]]:
    """Start redis-servers with extra arguments; all stopped after the test."""
    if shutil.which("redis-server") is None:
        if IN_CI:
            pytest.fail("redis-server is required in CI but is not available")
        pytest.skip("redis-server not available")
    started: list[RedisServer] = []

    def make(extra_args: list[str] | None = None, port: int | None = None) -> RedisServer:
        rs = RedisServer(port=port, extra_args=extra_args)
        rs.start()
        started.append(rs)
        return rs

    yield make
    for rs in started:
        rs.stop()
        shutil.rmtree(rs.dir, ignore_errors=True)


@pytest.fixture
def subscribers() -> Iterator[Callable[[str, str], Subscriber]]:
    """Open real subscribers; all closed after the test."""
    opened: list[Subscriber] = []

    def make(url: str, channel: str) -> Subscriber:
        sub = Subscriber(url, channel)
        opened.append(sub)
        return sub

    yield make
    for sub in opened:
        with contextlib.suppress(redis.RedisError, OSError):
            sub.close()
