"""Key-length sizing: sub-window sketches hold k keys of the length the detector sees.

A sketch splits its byte budget between buckets and a key store (``key_bytes``). The
store must hold ``k`` keys of the traffic's length, or the tail of the top-k is dropped
to make room (the sketch counts it in ``space_evictions``). The right split depends on
the keys, which only traffic tells: when a sub-window sketch is recycled, :class:`KeySizer`
looks at the keys it tracked and, if the split is off, makes the next sketch with
``key_bytes = k * (observed mean length * 1.25)``, between ``k * 16`` and
``min(k * max_key_len, memory / 2)``. Short keys give bytes back to the buckets; long
keys take them.

With ``adapt=True`` (the detector's default, ``DetectorConfig.adapt_keys``) half the budget
is not the end: when ``k`` keys of the observed length need more than half, the next sketch
is the automatic split with ``adapt_keys=True``, whose table gives bytes to its key store
while it fills (``docs/sketch.md``, "adapt_keys"), so it holds ``k`` keys as long as the
budget holds them plus a table of ``max(8, k)`` buckets per row. Such a sketch is reused
as it is (``clear()`` keeps the adapted split). The warning (raise ``--memory`` or lower
``--k``) then fires only on evidence: an adaptive sketch that still dropped keys for space
and ended below the store ``k`` keys need. With ``adapt=False`` it fires whenever half the
budget cannot hold ``k`` keys of the observed length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, cast

from hotkeyd.ratelog import RateLimitedLog

S = TypeVar("S")

__all__ = ["AUTO", "KeySizer"]

MIN_KEY_LEN = 16  # bytes per key the store never goes below
HEADROOM = 1.25  # the mean length varies between sub-windows
SHRINK = 0.5  # rebuild for shorter keys only when the store is this much too big
AUTO = 0  # target(): the automatic split whose key store adapts (never a real key_bytes)


class KeySizer(Generic[S]):
    """Chooses ``key_bytes`` for the next sub-window sketches.

    Args:
        make: builds an empty sketch with the given ``key_bytes`` (``None``: its default).
        k: top-k size of the sketches.
        memory: byte budget of one sketch.
        max_key_len: longest key accepted.
        log: where the "budget too small" warning goes.
        adapt: ``make(None)`` builds a sketch whose key store adapts (``adapt_keys=True``);
            used when ``k`` keys need more than half the budget.
    """

    def __init__(
        self,
        make: Callable[[int | None], S],
        k: int,
        memory: int,
        max_key_len: int,
        log: RateLimitedLog,
        *,
        adapt: bool = False,
    ) -> None:
        self._make = make
        self.adapt = adapt
        self.k = k
        self.memory = memory
        self.cap = max(min(k * max_key_len, memory // 2), max_key_len)
        self.floor = min(max(k * MIN_KEY_LEN, max_key_len), self.cap)
        self._log = log

    def target(
        self, key_bytes: int, keys: Iterable[bytes], space_evictions: int, adaptive: bool = False
    ) -> int | None:
        """The key store the next sketch should have: ``None`` to keep the sketch as it is,
        :data:`AUTO` for the adaptive automatic split (``adapt`` only), else a byte count.

        ``adaptive``: the sketch's own key store adapts (``adapt_keys``) and it may have
        grown past ``cap`` already.
        """
        lens = [len(key) for key in keys]
        if not lens:
            return None
        mean = sum(lens) / len(lens)
        base = int(self.k * max(mean, 1.0) * HEADROOM)
        need = max(base, 2 * key_bytes) if space_evictions else base  # the tracked keys fit
        if need > self.cap and self.adapt:
            if not adaptive:
                return AUTO  # let the sketch take the bytes it needs while it fills
            if space_evictions and key_bytes < base:
                self._too_small(mean, base, key_bytes)
            return None  # adapted already (clear() keeps it): reuse
        if need > self.cap:
            self._too_small(mean, need, self.cap)
        want = min(max(need, self.floor), self.cap)
        if want > key_bytes or want < key_bytes * SHRINK:
            return want
        return None

    def _too_small(self, mean: float, need: int, available: int) -> None:
        self._log.warning(
            "sizing",
            "sub-window sketches of %d bytes cannot hold k=%d keys of ~%d bytes "
            "(%d key bytes needed, at most %d available%s): the lightest of the top "
            "keys are dropped; raise the detector memory or lower k",
            self.memory,
            self.k,
            round(mean),
            need,
            available,
            " after the table gave its bytes to the key store" if self.adapt else "",
        )

    def renew(self, sketch: S, keys: Iterable[bytes] | None) -> S | None:
        """A fresh sketch sized for the keys ``sketch`` tracked, or ``None`` to reuse it.

        ``keys``: the sketch's top-k keys if already at hand (else read from it).
        """
        key_bytes = getattr(sketch, "key_bytes", None)
        if not isinstance(key_bytes, int):
            return None  # not a hotkeyd sketch: nothing to size
        if keys is None:
            keys = [key for key, _ in cast(Any, sketch).topk()]
        evictions = int(getattr(sketch, "space_evictions", 0))
        adaptive = bool(getattr(sketch, "adapt_keys", False))
        want = self.target(key_bytes, keys, evictions, adaptive)
        if want is None:
            return None
        return self._make(None if want == AUTO else want)
