"""Top-K sketches: HeavyKeeper and Count-Min (conservative update) with a top-k heap.

The C core (``hotkeyd.sketch._sketch``) is chosen once, at import, when it is built;
otherwise, or when ``HOTKEYD_PURE_PYTHON=1``, the pure-Python twin
(``hotkeyd.sketch._sketch_py``) takes over. Both give identical results for the same seed,
so the choice only changes speed. :data:`IMPLEMENTATION` says which one is active.

Usage::

    sk = HeavyKeeper(k=100, memory=65536, seed=0)
    sk.update(b"user:42")
    sk.update_lines(b"a\\nb\\na\\n")
    sk.topk(10)  # [(b"a", 2), (b"b", 1)]

Thread safety (both implementations): sharing one sketch between threads never
corrupts it or crashes the interpreter. The twin takes a lock around every method; the C
core relies on the GIL, except ``update_lines``, which releases it while it parses and
counts (other sketches and other Python code keep running meanwhile) and marks the
sketch busy, so other methods on that sketch wait for it (docs/sketch.md).

Design, error bounds and measured numbers: docs/sketch.md.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Protocol

from hotkeyd import native_or_twin
from hotkeyd.errors import SketchError

logger = logging.getLogger(__name__)

__all__ = [
    "IMPLEMENTATION",
    "CountMinTopK",
    "HeavyKeeper",
    "SketchLike",
    "murmur3_32",
    "new_sketch",
    "process_seed",
    "sketch_hash",
    "window_sums",
]


class SketchLike(Protocol):
    """What the detector needs from a sketch (both kinds, both implementations)."""

    @property
    def k(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def depth(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def max_key_len(self) -> int: ...
    @property
    def key_bytes(self) -> int: ...
    @property
    def space_evictions(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    def update(self, key: bytes | str, count: int = 1) -> None: ...
    def update_many(self, keys: Any, counts: Any = None) -> None: ...
    def update_lines(self, buf: Any, counted: bool = False) -> tuple[int, int, int]: ...
    def topk(self, n: int | None = None) -> list[tuple[bytes, int]]: ...
    def estimate(self, key: bytes | str) -> int: ...
    def decay(self, factor: float) -> None: ...
    def clear(self) -> None: ...
    def to_bytes(self) -> bytes: ...


_impl, IMPLEMENTATION = native_or_twin("hotkeyd.sketch._sketch", "hotkeyd.sketch._sketch_py")
if TYPE_CHECKING:
    # Type checkers see the classes of the stub (_sketch.pyi); the twin has the same API.
    from hotkeyd.sketch._sketch import (
        CountMinTopK,
        HeavyKeeper,
        murmur3_32,
        sketch_hash,
        window_sums,
    )
else:
    HeavyKeeper = _impl.HeavyKeeper
    CountMinTopK = _impl.CountMinTopK
    murmur3_32 = _impl.murmur3_32
    sketch_hash = _impl.sketch_hash
    window_sums = _impl.window_sums

_KINDS = {"heavykeeper": "HeavyKeeper", "countmin": "CountMinTopK"}


def new_sketch(kind: str, **kw: Any) -> SketchLike:
    """Build a sketch by name: ``kind`` is ``"heavykeeper"`` or ``"countmin"``.

    Keyword arguments go to the class (k, memory, width, depth, seed, max_key_len,
    key_bytes). Lets configuration files name the algorithm as a string.
    """
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, not {type(kind).__name__}")
    name = _KINDS.get(kind.lower())
    if name is None:
        raise SketchError(f"unknown sketch kind {kind!r} (allowed: {', '.join(sorted(_KINDS))})")
    cls = HeavyKeeper if name == "HeavyKeeper" else CountMinTopK
    sketch: SketchLike = cls(**kw)
    return sketch


_process_seed: int | None = None
_seed_lock = threading.Lock()


def process_seed() -> int:
    """This process's secret hash seed: 64 bits from ``os.urandom``, drawn on first use.

    Why a secret: with a seed anyone can know (the daemon used 0), keys can be crafted
    offline that share a key's buckets, so junk traffic reads as one hot key or inflates an
    honest key's rate. The daemon and ``hotkeyd replay`` use this seed unless one is given
    (``--hash-seed``, to reproduce a run exactly); it never appears in logs or messages.
    """
    global _process_seed
    with _seed_lock:
        if _process_seed is None:
            _process_seed = int.from_bytes(os.urandom(8), "little")
        return _process_seed
