"""Behaviour shared by both sketches and both implementations."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pytest


def test_properties_and_len(cls: Any) -> None:
    sk = cls(k=3, width=64, depth=3, seed=9, max_key_len=100, key_bytes=300)
    assert (sk.k, sk.width, sk.depth, sk.seed, sk.max_key_len, sk.key_bytes) == (
        3,
        64,
        3,
        9,
        100,
        300,
    )
    assert len(sk) == 0
    sk.update_many([b"a", b"b", b"c", b"d", b"d"])
    assert len(sk) == 3
    assert sk.topk(1) == [(b"d", 2)]
    assert repr(sk).startswith(f"{cls.__name__}(k=3, width=64, depth=3, seed=9")


def test_exact_when_alone(cls: Any) -> None:
    """Without collisions every sketch counts exactly, weighted or not."""
    sk = cls(k=10, memory=1 << 20)
    sk.update(b"a", 1_000_000)
    sk.update(b"a")
    sk.update_many([b"b"] * 5, [3] * 5)
    sk.update("ü", 7)
    assert sk.estimate(b"a") == 1_000_001
    assert sk.estimate(b"b") == 15
    assert sk.estimate("ü") == sk.estimate("ü".encode()) == 7
    assert sk.estimate(b"never") == 0
    assert sk.topk() == [(b"a", 1_000_001), (b"b", 15), ("ü".encode(), 7)]


def test_ties_sorted_by_key(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 20)
    sk.update_many([b"b", b"a", b"c", b"", b"ab"])
    assert sk.topk() == [(b"", 1), (b"a", 1), (b"ab", 1), (b"b", 1), (b"c", 1)]


def test_counter_saturates(cls: Any) -> None:
    sk = cls(k=2, memory=1 << 16)
    sk.update(b"a", 2**32 - 1)
    sk.update(b"a", 2**32 - 1)
    assert sk.estimate(b"a") == 2**32 - 1


def test_decay_floor_and_eviction(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 20)
    sk.update(b"big", 1000)
    sk.update(b"one", 1)
    sk.update(b"three", 3)
    sk.decay(0.5)
    # floor(c * floor(0.5 * 2^32) / 2^32): 1000 -> 500, 3 -> 1, 1 -> 0 (evicted)
    assert sk.topk() == [(b"big", 500), (b"three", 1)]
    assert len(sk) == 2
    assert sk.estimate(b"one") == 0
    sk.decay(1.0)
    assert sk.topk() == [(b"big", 500), (b"three", 1)]
    sk.decay(0.999)
    assert sk.topk() == [(b"big", 499)]


def test_clear_restarts(cls: Any) -> None:
    a = cls(k=5, memory=8192, seed=4)
    fresh = a.to_bytes()
    a.update_many([b"x%d" % i for i in range(200)])
    a.clear()
    assert len(a) == 0 and a.topk() == []
    assert a.to_bytes() == fresh


def test_pickle_round_trip(cls: Any) -> None:
    sk = cls(k=5, memory=8192, seed=4)
    sk.update_many([b"x%d" % (i % 17) for i in range(500)])
    copy = pickle.loads(pickle.dumps(sk))
    assert type(copy) is type(sk)
    assert copy.topk() == sk.topk()
    assert copy.to_bytes() == sk.to_bytes()


def test_key_budget_admission(cls: Any) -> None:
    """Keys beyond the key-byte budget stay in the counters but not in the heap."""
    sk = cls(k=4, memory=1 << 16, max_key_len=10, key_bytes=20)
    sk.update(b"a" * 10, 8)
    sk.update(b"b" * 10, 3)
    sk.update(b"c" * 10, 3)  # budget full: 20 bytes already held
    assert [k for k, _ in sk.topk()] == [b"a" * 10, b"b" * 10]
    assert sk.estimate(b"c" * 10) == 3
    sk.update(b"d", 2)  # even one more byte does not fit
    assert len(sk) == 2
    sk.decay(0.25)  # a: 8 -> 2, b: 3 -> 0 (evicted, its 10 bytes freed)
    sk.update(b"d", 2)
    assert sk.topk() == [(b"a" * 10, 2), (b"d", 2)]


def test_heap_replacement_keeps_top(cls: Any) -> None:
    sk = cls(k=3, memory=1 << 20)
    for i in range(50):
        sk.update(b"key%d" % i, i + 1)
    assert sk.topk() == [(b"key49", 50), (b"key48", 49), (b"key47", 48)]


def test_countmin_merge(impl: Any) -> None:
    a = impl.CountMinTopK(k=5, memory=1 << 16, seed=2)
    b = impl.CountMinTopK(k=5, memory=1 << 16, seed=2)
    a.update_many([b"x", b"y", b"y"])
    b.update_many([b"y", b"z", b"z", b"z"])
    a.merge(b)
    assert a.topk() == [(b"y", 3), (b"z", 3), (b"x", 1)]
    a.merge(a)
    assert a.topk() == [(b"y", 6), (b"z", 6), (b"x", 2)]
    assert b.topk() == [(b"z", 3), (b"y", 1)]


def test_heavykeeper_has_no_merge(impl: Any) -> None:
    assert not hasattr(impl.HeavyKeeper(k=2, memory=8192), "merge")


@pytest.mark.parametrize("c0", [3, 12, 16])
def test_weighted_decay_matches_unit_updates(native_mod: Any, c0: int) -> None:
    """A weighted foreign update decays a bucket like the same number of unit updates.

    One bucket whose weaker slot is held by key A with count c0 (the other slot by Z,
    far heavier, so A's slot is the one that decays); key B arrives with n=40 units,
    either as one weighted update (geometric jumps) or as 40 unit updates (the
    paper's loop). Over many seeds the takeover rate and the mean final counts must agree.
    """
    n, runs = 40, 3000
    stats = {}
    for weighted in (True, False):
        takeovers = 0
        b_total = 0
        for seed in range(runs):
            sk = native_mod.HeavyKeeper(k=2, width=1, depth=1, seed=seed)
            sk.update(b"A", c0)
            sk.update(b"Z", 100_000)
            if weighted:
                sk.update(b"B", n)
            else:
                sk.update_many([b"B"] * n)
            b_est = sk.estimate(b"B")
            takeovers += b_est > 0
            b_total += b_est
        stats[weighted] = (takeovers / runs, b_total / runs)
    (p_w, mean_w), (p_u, mean_u) = stats[True], stats[False]
    assert abs(p_w - p_u) < 0.05
    assert abs(mean_w - mean_u) < 0.1 * max(mean_u, 1.0) + 0.5


def _slots(sk: Any) -> list[tuple[int, int]]:
    """(fingerprint, counter) of every HeavyKeeper slot, read from the serialized table."""
    n = sk.width * sk.depth * 2
    return [(w >> 32, w & 0xFFFFFFFF) for w in struct.unpack_from(f"<{n}Q", sk.to_bytes(), 60)]


def test_heavykeeper_bucket_slots(impl: Any) -> None:
    """Two slots per bucket: a key takes a free slot, and only the weaker slot decays.

    One bucket (width=1, depth=1): H and L take the two slots exactly; then 3,000
    distinct one-off keys hit the full bucket. They may only decay the weaker slot,
    so H's counter keeps its exact count (with one slot per bucket, each of them
    would decay H with probability 1.08^-C). Counters are read from the table, since
    estimate() would also consult the heap.
    """
    sk = impl.HeavyKeeper(k=2, width=1, depth=1, seed=7)
    fh, fl = impl.sketch_hash(b"H", 7), impl.sketch_hash(b"L", 7)
    sk.update(b"H", 40)
    sk.update(b"L", 3)
    assert _slots(sk) == [(fh, 40), (fl, 3)]
    sk.update_many([b"noise%d" % i for i in range(3000)])
    slots = _slots(sk)
    assert slots[0] == (fh, 40)
    assert slots[1][0] not in (fh, fl)  # the weaker slot was decayed and taken over
    assert sk.topk() == [(b"H", 40), (b"L", 3)]
