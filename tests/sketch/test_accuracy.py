"""Accuracy against exact counts on seeded Zipf streams (bounds from docs/sketch.md).

1M events over a 1M-key universe, alpha in {0.8, 1.0, 1.2}, k=100. The bounds are
the documented guarantees for these streams with some margin over the measured
values; the numbers for 10M-event streams are in docs/sketch.md (benchmarks).
Runs on the C core only: the twin is identical by the parity tests, and too slow
for 1M-event streams.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from .conftest import PURE

pytestmark = pytest.mark.skipif(PURE, reason="pure mode is checked by the parity tests")

EVENTS = 1_000_000
UNIVERSE = 1_000_000
K = 100

# alpha -> (min precision@100 HK 64 KiB, max ARE HK 64 KiB, min precision@100 HK 16 KiB,
#           max ARE HK 16 KiB). 64 KiB: the targets (1.00 at alpha >= 1.0, 0.99 at
# 0.8, ARE <= 1e-3); 16 KiB: >= 0.90 (target) and tighter where measured far above it.
HK_BOUNDS = {
    0.8: (0.99, 1e-3, 0.90, 1e-2),
    1.0: (1.00, 1e-3, 0.95, 1e-2),
    1.2: (1.00, 1e-3, 0.97, 1e-2),
}
CM_MIN_PRECISION_64K = 0.98
CM_MAX_ARE_64K = 1e-3


@pytest.fixture(scope="module", params=[0.8, 1.0, 1.2])
def stream(request: pytest.FixtureRequest, zipf: Any) -> tuple[float, list[bytes], Counter[bytes]]:
    keys = zipf.zipf_keys(EVENTS, UNIVERSE, request.param, seed=1)
    return request.param, keys, Counter(keys)


def precision(top: list[tuple[bytes, int]], truth: list[bytes]) -> float:
    """Share of the true top-n present in the reported top-n."""
    return len({k for k, _ in top} & set(truth)) / len(truth)


def _truth(counts: Counter[bytes], n: int) -> list[bytes]:
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def _are(top: list[tuple[bytes, int]], counts: Counter[bytes]) -> float:
    return sum(abs(c - counts[k]) / counts[k] for k, c in top) / len(top)


def test_heavykeeper_64k(
    native_mod: Any, stream: tuple[float, list[bytes], Counter[bytes]]
) -> None:
    alpha, keys, counts = stream
    min_prec, max_are, _, _ = HK_BOUNDS[alpha]
    sk = native_mod.HeavyKeeper(k=K, memory=65536, seed=0)
    sk.update_many(keys)
    assert sk.nbytes <= 65536
    top = sk.topk()
    assert len(top) == K
    assert precision(top, _truth(counts, K)) >= min_prec
    assert precision(top[:10], _truth(counts, 10)) == 1.0
    assert _are(top, counts) <= max_are
    # HeavyKeeper only loses counts (decay), never invents them.
    assert all(c <= counts[k] for k, c in top)


def test_heavykeeper_16k(
    native_mod: Any, stream: tuple[float, list[bytes], Counter[bytes]]
) -> None:
    alpha, keys, counts = stream
    sk = native_mod.HeavyKeeper(k=K, memory=16384, seed=0)
    sk.update_many(keys)
    assert sk.nbytes <= 16384
    top = sk.topk()
    _, _, min_prec, max_are = HK_BOUNDS[alpha]
    assert precision(top, _truth(counts, K)) >= min_prec
    assert precision(top[:10], _truth(counts, 10)) == 1.0
    assert _are(top, counts) <= max_are
    assert all(c <= counts[k] for k, c in top)


@pytest.mark.parametrize("alpha", [1.0, 1.2])
@pytest.mark.parametrize("stream_seed", [2, 3, 4, 5])
def test_heavykeeper_64k_other_streams(
    native_mod: Any, zipf: Any, alpha: float, stream_seed: int
) -> None:
    """The 64 KiB targets hold on other streams too, not only on the benchmark's seed."""
    keys = zipf.zipf_keys(EVENTS, UNIVERSE, alpha, seed=stream_seed)
    counts = Counter(keys)
    sk = native_mod.HeavyKeeper(k=K, memory=65536, seed=stream_seed)
    sk.update_many(keys)
    top = sk.topk()
    assert precision(top, _truth(counts, K)) == 1.0
    assert _are(top, counts) <= 1e-3


def test_countmin_64k(native_mod: Any, stream: tuple[float, list[bytes], Counter[bytes]]) -> None:
    _, keys, counts = stream
    sk = native_mod.CountMinTopK(k=K, memory=65536, seed=0)
    sk.update_many(keys)
    top = sk.topk()
    assert precision(top, _truth(counts, K)) >= CM_MIN_PRECISION_64K
    assert _are(top, counts) <= CM_MAX_ARE_64K
    # Count-Min never underestimates; the classic bound e*N/w holds for every top key.
    bound = math.e * EVENTS / sk.width
    for key, c in top:
        assert counts[key] <= c <= counts[key] + bound
        assert counts[key] <= sk.estimate(key) <= c


def test_update_lines_matches_update_many(
    native_mod: Any, stream: tuple[float, list[bytes], Counter[bytes]]
) -> None:
    """The wire-format fast path counts exactly what update_many counts."""
    _, keys, _ = stream
    a = native_mod.HeavyKeeper(k=K, memory=65536, seed=5)
    b = native_mod.HeavyKeeper(k=K, memory=65536, seed=5)
    a.update_many(keys[:200_000])
    assert b.update_lines(b"\n".join(keys[:200_000])) == (200_000, 0, 0)
    assert a.to_bytes() == b.to_bytes()
