"""In-memory fakes: a list-backed source and an exact counter standing in for the sketch."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable
from typing import Any

from hotkeyd.batch import Batch
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.protocol.lines import parse_counted
from hotkeyd.sources.base import InMemorySource


class ListSource(InMemorySource):
    """A ``Source`` that hands over the given batches, one per ``next_batch`` call.

    Exhausted once every batch was handed over (a finite input, as a file). Records
    what the service did with it: ``committed`` calls, ``started``/``closed``.
    """

    def __init__(self, batches: Iterable[Batch], name: str = "list") -> None:
        self.name = name
        self.reports_idle = False
        self._todo = list(batches)
        self.handed = 0
        self.committed = 0
        self.started = self.closed = False

    def start(self) -> None:
        self.started = True

    def next_batch(self, max_wait: float) -> list[Batch]:
        if not self._todo:
            return []
        self.handed += 1
        return [self._todo.pop(0)]

    def commit(self) -> None:
        self.committed += 1

    @property
    def exhausted(self) -> bool:
        return not self._todo

    def close(self) -> None:
        self.closed = True


class ExactSketch:
    """A ``SketchLike`` that counts every key exactly (up to ``capacity`` distinct keys).

    Same surface, key rule and counted-line grammar as :class:`hotkeyd.sketch.HeavyKeeper`,
    and the same ``topk`` order (count descending, then key ascending); memory grows
    with the keys, so use it for tests, not traffic.
    """

    def __init__(
        self, k: int = 200, max_key_len: int = 1024, capacity: int = 1 << 20, seed: int = 0
    ) -> None:
        self.k = k
        self.max_key_len = max_key_len
        self.capacity = capacity
        self.seed = seed
        self.width = self.depth = 0
        self.space_evictions = 0
        self.counts: dict[bytes, int] = {}

    @property
    def key_bytes(self) -> int:
        return sum(len(k) for k in self.counts)

    @property
    def nbytes(self) -> int:
        return 64 * len(self.counts) + self.key_bytes

    def __len__(self) -> int:
        return min(len(self.counts), self.k)

    def _add(self, key: bytes, count: int) -> None:
        if key in self.counts:
            self.counts[key] += count
        elif len(self.counts) < self.capacity:
            self.counts[key] = count

    def update(self, key: bytes | str, count: int = 1) -> None:
        self.update_many([key], [count])

    def update_many(self, keys: Any, counts: Any = None) -> None:
        """Validate the whole batch first, then apply it (as the real sketch does)."""
        kbs = [key_bytes(k) for k in keys]
        cs = [1] * len(kbs) if counts is None else [int(c) for c in counts]
        if len(cs) != len(kbs) or any(c < 0 for c in cs):
            raise ValueError("bad counts")
        if any(len(k) > self.max_key_len for k in kbs):
            raise ValueError("key too long")
        for k, c in zip(kbs, cs, strict=True):
            self._add(k, c)

    def update_lines(self, buf: Any, counted: bool = False) -> tuple[int, int, int]:
        events = oversized = malformed = 0
        for line in bytes(buf).split(b"\n"):
            line = line[:-1] if line.endswith(b"\r") else line
            if not line:
                continue
            count = 1
            if counted:
                parsed = parse_counted(line)
                if parsed is None:
                    malformed += 1
                    continue
                line, count = parsed
            if len(line) > self.max_key_len:
                oversized += 1
                continue
            self._add(line, count)
            events += count
        return events, oversized, malformed

    def topk(self, n: int | None = None) -> list[tuple[bytes, int]]:
        return heapq.nsmallest(n or self.k, self.counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def estimate(self, key: bytes | str) -> int:
        return self.counts.get(key_bytes(key), 0)

    def decay(self, factor: float) -> None:
        self.counts = {k: int(c * factor) for k, c in self.counts.items() if int(c * factor) > 0}

    def clear(self) -> None:
        self.counts = {}

    def to_bytes(self) -> bytes:
        """Length-prefixed ``(key, count)`` pairs, sorted by key (not the sketch format)."""
        out = bytearray()
        for k, c in sorted(self.counts.items()):
            out += struct.pack("<IQ", len(k), c) + k
        return bytes(out)
