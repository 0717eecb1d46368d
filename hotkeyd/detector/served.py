"""Reads that apps served from their local caches, per hot key and sub-window.

The detector adds reported demand (``hotkeyd.protocol.demand``) to its sketches like any other
access, so a hot key's rate is its *total* demand. It also keeps these exact counts
beside the sketches, in step with their sub-windows, so ``top`` can say how much of a
key's rate the app caches absorbed (``local``). Only keys hot here are ever added, so
this holds at most ``max_hot`` keys per sub-window.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ServedRing"]


class ServedRing:
    """Exact per-key counts for the sub-windows ``[cur - N, cur]``.

    Args:
        subwindows: ``N``, closed sub-windows a rate sums over (as the sketch ring).
    """

    def __init__(self, subwindows: int) -> None:
        self.n = subwindows
        self._slots: dict[int, dict[bytes, int]] = {}

    def add(self, index: int, ident: bytes, n: int) -> None:
        """Count ``n`` locally served reads of ``ident`` into sub-window ``index``."""
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = {}
        slot[ident] = slot.get(ident, 0) + n

    def add_many(self, index: int, idents: Sequence[bytes], counts: Sequence[int]) -> None:
        """:meth:`add` for many keys at once."""
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = {}
        get = slot.get
        for ident, n in zip(idents, counts, strict=True):
            slot[ident] = get(ident, 0) + n

    def advance(self, cur: int) -> None:
        """``cur`` is the open sub-window now: forget those that left the window."""
        for index in [i for i in self._slots if i < cur - self.n]:
            del self._slots[index]

    def sums(self, cur: int) -> dict[bytes, int]:
        """Counts per key over the closed sub-windows ``[cur - N, cur)``."""
        out: dict[bytes, int] = {}
        for index, slot in self._slots.items():
            if cur - self.n <= index < cur:
                for ident, n in slot.items():
                    out[ident] = out.get(ident, 0) + n
        return out
