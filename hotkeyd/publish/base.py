"""The Publisher contract and the pieces every publisher shares.

The detector loop hands each tick's changes to ``publisher.publish(...)`` and moves
on; it must never wait for a network. So a publisher owns two things the detector
does not want to know about:

* **sequence numbers** (:class:`HotSetState` assigns them, +1 per message, never
  reused within one instance's life), and
* **the current hot set**, kept from the deltas it is given (and replaced wholesale
  by :meth:`Publisher.update_state`). Because the hot set is *state*, a publisher that
  lost messages (queue overflow, Redis restart) can always recover with one
  ``full=true`` message instead of replaying history.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from hotkeyd.clock import Clock
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message, encode_key

__all__ = [
    "HotSetState",
    "Publisher",
    "default_instance_id",
    "normalize_top",
]

DEFAULT_TOP_LIMIT = 100


def default_instance_id() -> str:
    """Return ``<hostname>-<pid>-<4 hex>``: readable, and unique across restarts.

    The random suffix matters: a container restarted with the same hostname and pid 1
    must not continue an old instance's sequence numbers.
    """
    host = socket.gethostname().split(".", 1)[0] or "host"
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)[:63]
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


def normalize_top(
    top: Sequence[Mapping[str, Any]], limit: int = DEFAULT_TOP_LIMIT
) -> tuple[dict[str, Any], ...]:
    """Return JSON-ready top entries, highest rate first, at most ``limit``.

    Each entry needs ``key`` (bytes are encoded like wire keys, text kept) and
    ``rate``; other JSON-serializable fields (``rule``, ``db``...) are kept.
    """
    out: list[dict[str, Any]] = []
    for item in top:
        entry = dict(item)
        key = entry.get("key")
        if isinstance(key, (bytes, bytearray, memoryview)):
            entry.pop("enc", None)
            entry.update(encode_key(bytes(key)))
        elif not isinstance(key, str):
            raise TypeError(f"top entry key must be bytes or str, got {type(key).__name__}")
        entry["rate"] = round(float(entry.get("rate", 0.0)), 3)
        out.append(entry)
    out.sort(key=lambda e: -e["rate"])
    kept = tuple(out[:limit])
    try:  # fail here, in the caller, rather than later in a background sender
        json.dumps(kept)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"top entries must be JSON-serializable: {exc}") from exc
    return kept


@runtime_checkable
class Publisher(Protocol):
    """Where hot/cool notifications go (Redis, stdout, memory)."""

    @property
    def instance(self) -> str:
        """Instance id stamped on every message."""
        ...

    @property
    def healthy(self) -> bool:
        """Connected and the last publish succeeded (for ``/healthz`` and ``check``)."""
        ...

    @property
    def last_error(self) -> str | None:
        """One line describing the latest failure, None after a success."""
        ...

    @property
    def unsent(self) -> int:
        """Messages :meth:`close` could not deliver (0 until close() returned)."""
        ...

    def start(self) -> None:
        """Begin publishing (connect, start background work)."""
        ...

    def publish(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry] = (),
        cool: Sequence[CoolEntry] = (),
        *,
        full: bool = False,
        final: bool = False,
    ) -> None:
        """Announce one tick's changes; never blocks on I/O; assigns the seq.

        ``hot`` are keys that just became hot, ``still_hot`` re-announcements before
        their TTL runs out; both go out in the message's ``hot`` list. Nothing is
        sent when all three are empty unless ``full`` or ``final`` is set.
        """
        ...

    def update_state(
        self, hot_set: Sequence[HotEntry], top: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """Replace the whole current hot set and the top-by-rate list; never blocks."""
        ...

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is pending within ``timeout`` seconds, then release resources."""
        ...


_Ident = tuple[bytes, int]


class HotSetState:
    """Thread-safe hot set + sequence counter of one instance.

    Args:
        instance: instance id stamped on messages.
        clock: ``time()`` stamps messages.
        top_limit: how many top-by-rate entries to keep for the snapshot.
    """

    def __init__(self, instance: str, clock: Clock, top_limit: int = DEFAULT_TOP_LIMIT) -> None:
        self.instance = instance
        self.clock = clock
        self.top_limit = top_limit
        self.lock = threading.RLock()
        self._seq = 0
        self._version = 0  # bumped on every change, so writers know when to refresh
        self._hot: dict[_Ident, HotEntry] = {}
        self._top: tuple[dict[str, Any], ...] = ()

    @property
    def seq(self) -> int:
        """Sequence number of the last message built (0 before the first)."""
        with self.lock:
            return self._seq

    @property
    def version(self) -> int:
        """Changes whenever the hot set, top list or seq changes."""
        with self.lock:
            return self._version

    def __len__(self) -> int:
        with self.lock:
            return len(self._hot)

    def apply(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry],
        cool: Sequence[CoolEntry],
        *,
        full: bool = False,
    ) -> None:
        """Fold one tick's changes into the hot set (no message, no seq)."""
        with self.lock:
            self._version += 1
            if full:
                self._hot.clear()
            for entry in hot:
                self._hot[(entry.key, entry.db)] = entry
            for entry in still_hot:
                self._hot[(entry.key, entry.db)] = entry
            for c in cool:
                self._hot.pop((c.key, c.db), None)

    def record(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry],
        cool: Sequence[CoolEntry],
        *,
        full: bool = False,
        final: bool = False,
    ) -> Message | None:
        """Fold the changes in and return the message announcing them (None if nothing to say).

        Synchronous publishers (stdout, memory) send exactly this message; the Redis
        publisher queues and coalesces instead, so it uses :meth:`apply` directly.
        """
        with self.lock:
            self.apply(hot, still_hot, cool, full=full)
            if full:
                return self.full_message(final=final)
            if hot or still_hot or cool or final:
                return self.delta_message(hot, still_hot, cool, final=final)
            return None

    def replace(self, hot_set: Sequence[HotEntry], top: Sequence[Mapping[str, Any]]) -> None:
        """Replace the hot set and the top list wholesale.

        The version moves only when something did: an idle daemon's heartbeat then
        refreshes its snapshot's expiry instead of writing the same snapshot again.
        """
        normalized = normalize_top(top, self.top_limit)
        fresh = {(e.key, e.db): e for e in hot_set}
        with self.lock:
            if fresh == self._hot and normalized == self._top:
                return
            self._version += 1
            self._hot = fresh
            self._top = normalized

    def delta_message(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry],
        cool: Sequence[CoolEntry],
        *,
        final: bool = False,
    ) -> Message:
        """Build the next message for these changes, taking the next seq."""
        with self.lock:
            self._seq += 1
            self._version += 1
            return Message(
                instance=self.instance,
                seq=self._seq,
                ts=self.clock.time(),
                hot=(*hot, *still_hot),
                cool=tuple(cool),
                final=final,
            )

    def full_message(self, *, final: bool = False) -> Message:
        """Build a ``full=true`` message with the whole hot set, taking the next seq."""
        with self.lock:
            self._seq += 1
            self._version += 1
            return Message(
                instance=self.instance,
                seq=self._seq,
                ts=self.clock.time(),
                hot=self._sorted_hot(),
                full=True,
                final=final,
            )

    def snapshot(self) -> Message:
        """The snapshot: whole hot set + top, labelled with the last seq taken.

        Every change up to that seq is included, so a client that bootstraps from it
        skips messages with ``seq <=`` the snapshot's.
        """
        with self.lock:
            return Message(
                instance=self.instance,
                seq=self._seq,
                ts=self.clock.time(),
                hot=self._sorted_hot(),
                full=True,
                top=self._top,
            )

    def hot_set(self) -> list[HotEntry]:
        """The current hot set, highest rate first."""
        with self.lock:
            return list(self._sorted_hot())

    def _sorted_hot(self) -> tuple[HotEntry, ...]:
        return tuple(sorted(self._hot.values(), key=lambda e: (-e.rate, e.db, e.key)))
