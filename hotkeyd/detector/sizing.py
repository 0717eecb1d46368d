"""Key-length sizing: sub-window sketches hold k keys of the length the detector sees.

A sketch splits its byte budget between buckets and a key store (``key_bytes``). The
store must hold ``k`` keys of the traffic's length, or the tail of the top-k is dropped
to make room (the sketch counts it in ``space_evictions``). The right split depends on
the keys, which only traffic tells: when a sub-window sketch is recycled, :class:`KeySizer`
looks at the keys it tracked and, if the split is off, makes the next sketch with
``key_bytes = k * (observed mean length * 1.25)``, between ``k * 16`` and
``min(k * max_key_len, memory / 2)``. Short keys give bytes back to the buckets; long
keys take them. When even half the budget cannot hold ``k`` keys of the observed
length, it says so in a rate-limited warning (raise ``--memory`` or lower ``--k``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, cast

from hotkeyd.ratelog import RateLimitedLog

S = TypeVar("S")

__all__ = ["KeySizer"]

MIN_KEY_LEN = 16  # bytes per key the store never goes below
HEADROOM = 1.25  # the mean length varies between sub-windows
SHRINK = 0.5  # rebuild for shorter keys only when the store is this much too big


class KeySizer(Generic[S]):
    """Chooses ``key_bytes`` for the next sub-window sketches.

    Args:
        make: builds an empty sketch with the given ``key_bytes`` (``None``: its default).
        k: top-k size of the sketches.
        memory: byte budget of one sketch.
        max_key_len: longest key accepted.
        log: where the "budget too small" warning goes.
    """

    def __init__(
        self,
        make: Callable[[int | None], S],
        k: int,
        memory: int,
        max_key_len: int,
        log: RateLimitedLog,
    ) -> None:
        self._make = make
        self.k = k
        self.memory = memory
        self.cap = max(min(k * max_key_len, memory // 2), max_key_len)
        self.floor = min(max(k * MIN_KEY_LEN, max_key_len), self.cap)
        self._log = log

    def target(self, key_bytes: int, keys: Iterable[bytes], space_evictions: int) -> int | None:
        """The key store the next sketch should have, or ``None`` to keep ``key_bytes``."""
        lens = [len(key) for key in keys]
        if not lens:
            return None
        mean = sum(lens) / len(lens)
        need = int(self.k * max(mean, 1.0) * HEADROOM)
        if space_evictions:
            need = max(need, 2 * key_bytes)  # the tracked keys are the ones that fit
        if need > self.cap:
            self._log.warning(
                "sizing",
                "sub-window sketches of %d bytes cannot hold k=%d keys of ~%d bytes "
                "(%d key bytes needed, at most %d available): the lightest of the top "
                "keys are dropped; raise the detector memory or lower k",
                self.memory,
                self.k,
                round(mean),
                need,
                self.cap,
            )
        want = min(max(need, self.floor), self.cap)
        if want > key_bytes or want < key_bytes * SHRINK:
            return want
        return None

    def renew(self, sketch: S, keys: Iterable[bytes] | None) -> S | None:
        """A fresh sketch sized for the keys ``sketch`` tracked, or ``None`` to reuse it.

        ``keys``: the sketch's top-k keys if already at hand (else read from it).
        """
        key_bytes = getattr(sketch, "key_bytes", None)
        if not isinstance(key_bytes, int):
            return None  # not a hotkeyd sketch: nothing to size
        if keys is None:
            keys = [key for key, _ in cast(Any, sketch).topk()]
        want = self.target(key_bytes, keys, int(getattr(sketch, "space_evictions", 0)))
        return None if want is None else self._make(want)
