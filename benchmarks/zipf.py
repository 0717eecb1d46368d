"""Seeded Zipf key streams shared by the benchmarks and the accuracy tests.

Rank r (1-based) has probability proportional to r^-alpha over a universe of N
distinct keys ``item:%07d``. Ranks are mapped to key ids through a seeded
permutation, so the hottest key is not ``item:0000000`` and nothing can profit
from key order. Same (n, universe, alpha, seed) -> same stream, on any machine with
the same numpy major version (numpy's PCG64 stream is stable).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["exact_top", "universe_keys", "zipf_ids", "zipf_keys", "zipf_lines"]

_UNIVERSE_CACHE: dict[int, list[bytes]] = {}


def universe_keys(universe: int) -> list[bytes]:
    """The key of each id: ``item:%07d`` (12 bytes for ids < 10^7). Cached."""
    keys = _UNIVERSE_CACHE.get(universe)
    if keys is None:
        keys = [b"item:%07d" % i for i in range(universe)]
        _UNIVERSE_CACHE[universe] = keys
    return keys


def zipf_ids(n: int, universe: int = 1_000_000, alpha: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` key ids (int64) drawn from a Zipf(alpha) law over ``universe`` keys."""
    rng = np.random.Generator(np.random.PCG64(seed))
    weights = np.arange(1, universe + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    np.minimum(ranks, universe - 1, out=ranks)
    perm = rng.permutation(universe)
    return perm[ranks].astype(np.int64)


def zipf_keys(n: int, universe: int = 1_000_000, alpha: float = 1.0, seed: int = 0) -> list[bytes]:
    """The stream as a list of bytes keys (objects shared per distinct key)."""
    keys = universe_keys(universe)
    return [keys[i] for i in zipf_ids(n, universe, alpha, seed).tolist()]


def zipf_lines(n: int, universe: int = 1_000_000, alpha: float = 1.0, seed: int = 0) -> bytes:
    """The stream as one newline-separated buffer (the update_lines wire format)."""
    return b"\n".join(zipf_keys(n, universe, alpha, seed)) + b"\n"


def exact_top(keys: list[bytes], n: int) -> list[tuple[bytes, int]]:
    """Exact top-n by count (ties by key), the ground truth for precision and ARE."""
    counts = Counter(keys)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
