"""An in-memory publisher: records every message, for tests and simulations.

It runs the same :class:`~hotkeyd.publish.base.HotSetState` as the real publishers,
so a detector or service test can assert on exact messages and sequence numbers
without a network.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message
from hotkeyd.publish.base import DEFAULT_TOP_LIMIT, HotSetState

__all__ = ["MemoryPublisher"]


class MemoryPublisher:
    """Keeps published :class:`~hotkeyd.protocol.wire.Message` objects in :attr:`messages`.

    Args:
        instance: instance id stamped on messages.
        clock: stamps messages (a ``ManualClock`` in tests).
        full_on_start: send a ``full=true`` message from :meth:`start`, as the Redis
            publisher does on (re)connect.
        on_message: called with each message as it is published (in-process
            subscribers, e.g. the demo without Redis).
    """

    def __init__(
        self,
        instance: str = "memory",
        clock: Clock | None = None,
        *,
        full_on_start: bool = False,
        top_limit: int = DEFAULT_TOP_LIMIT,
        on_message: Callable[[Message], object] | None = None,
    ) -> None:
        self.on_message = on_message
        self._state = HotSetState(instance, clock or SystemClock(), top_limit)
        self._lock = threading.Lock()
        self.messages: list[Message] = []
        self.full_on_start = full_on_start
        self.started = False
        self.closed = False

    @property
    def instance(self) -> str:
        return self._state.instance

    @property
    def healthy(self) -> bool:
        return self.started and not self.closed

    @property
    def last_error(self) -> str | None:
        return None

    def start(self) -> None:
        self.started = True
        if self.full_on_start:
            self._record(self._state.full_message())

    def publish(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry] = (),
        cool: Sequence[CoolEntry] = (),
        *,
        full: bool = False,
        final: bool = False,
    ) -> None:
        with self._state.lock:  # recorded in seq order
            msg = self._state.record(hot, still_hot, cool, full=full, final=final)
            if msg is not None:
                self._record(msg)

    def update_state(
        self, hot_set: Sequence[HotEntry], top: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        self._state.replace(hot_set, top)

    def close(self, timeout: float = 5.0) -> None:
        self.closed = True

    @property
    def unsent(self) -> int:
        """Always 0: every message is recorded."""
        return 0

    # --- test helpers
    def snapshot(self) -> Message:
        """What the Redis publisher would store as this instance's snapshot now."""
        return self._state.snapshot()

    def hot_set(self) -> list[HotEntry]:
        """The current hot set as the publisher tracks it, highest rate first."""
        return self._state.hot_set()

    def clear(self) -> None:
        """Forget recorded messages (sequence numbers keep counting)."""
        with self._lock:
            self.messages.clear()

    def _record(self, msg: Message) -> None:
        with self._lock:
            self.messages.append(msg)
        if self.on_message is not None:
            self.on_message(msg)
