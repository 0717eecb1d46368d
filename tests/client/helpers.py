"""Test helpers: polling, Redis command counts, and a stand-in for the daemon publisher.

It publishes :class:`hotkeyd.protocol.wire.Message` JSON on the events channel and writes the
snapshot + instances heartbeat exactly as the wire format describes, so client tests
exercise the same bytes the daemon will send.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message, Namespace


class FakeDaemon:
    def __init__(
        self,
        client: redis.Redis,
        namespace: Namespace,
        instance: str = "test-1",
        ttl_ms: int = 5000,
    ) -> None:
        self.r = client
        self.ns = namespace
        self.instance = instance
        self.ttl_ms = ttl_ms
        self.seq = 0
        self.hot: dict[bytes, HotEntry] = {}

    def _entry(self, key: bytes, ttl_ms: int | None) -> HotEntry:
        return HotEntry(
            key=key, rate=1000.0, rule="default", ttl_ms=ttl_ms or self.ttl_ms, since=time.time()
        )

    def _send(self, msg: Message, publish: bool = True) -> Message:
        if publish:
            self.r.publish(self.ns.channel, msg.dumps())
        return msg

    def _next(self, **kw: object) -> Message:
        self.seq += 1
        return Message(instance=self.instance, seq=self.seq, ts=time.time(), **kw)  # type: ignore[arg-type]

    def make_hot(self, *keys: bytes, ttl_ms: int | None = None, publish: bool = True) -> Message:
        entries = tuple(self._entry(k, ttl_ms) for k in keys)
        for e in entries:
            self.hot[e.key] = e
        msg = self._send(self._next(hot=entries), publish)
        self.write_snapshot()
        return msg

    def make_cool(self, *keys: bytes, publish: bool = True) -> Message:
        for k in keys:
            self.hot.pop(k, None)
        msg = self._send(self._next(cool=tuple(CoolEntry(k, "default") for k in keys)), publish)
        self.write_snapshot()
        return msg

    def full(self) -> Message:
        return self._send(self._next(hot=tuple(self.hot.values()), full=True))

    def final(self) -> Message:
        return self._send(self._next(final=True))

    def write_snapshot(self) -> None:
        snap = Message(
            instance=self.instance,
            seq=self.seq,
            ts=time.time(),
            hot=tuple(self.hot.values()),
            full=True,
        )
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.ns.snapshot(self.instance), snap.dumps(), px=30_000)
        pipe.zadd(self.ns.instances, {self.instance: time.time()})
        pipe.execute()


def wait_until(cond: Callable[[], object], timeout: float = 5.0, interval: float = 0.005) -> bool:
    """Poll ``cond`` until true (returns True) or ``timeout`` (returns False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return bool(cond())


def get_calls(client: redis.Redis, cmd: str = "get") -> int:
    """How many times Redis ran ``cmd`` (INFO commandstats)."""
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{cmd}", {}).get("calls", 0))
