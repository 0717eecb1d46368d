"""Run ``hotkeyd run`` as a real subprocess and talk to it like a user would."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from hotkeyd.protocol.wire import Message
from hotkeyd.testing import DaemonProcess


class Daemon(DaemonProcess):
    """``python -m hotkeyd run`` fed on stdin, with its HTTP endpoint on a free port."""


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
