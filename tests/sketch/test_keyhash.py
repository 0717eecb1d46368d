"""The sketches' key hash: one 64-bit multiply-fold hash for every key length
(native/keyhash.h, _sketch_py._hash64), two overlapping words under 16 bytes, 16-byte
blocks from 16 bytes; sketch_hash is its 32-bit fold. C and twin bit-identical."""

from __future__ import annotations

from typing import Any

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.errors import SketchError

# Pinned, so C and twin cannot drift together (values of the spec in native/keyhash.h).
KNOWN = [
    (b"", 0, 2987548598),
    (b"a", 0, 616650840),
    (b"ab", 5, 969630567),
    (b"abc", 5, 3077557970),
    (b"user:42", 0, 4047289806),
    (b"item:0000042", 0, 1108141598),
    (bytes(range(15)), 0xFFFFFFFF, 4279142231),
    (b"x" * 16, 1, 1974890656),
    (b"a" * 32, 0, 362965695),
    (b"session:" + b"0" * 36, 0, 2801494012),
    (b"k:%098d" % 7, 1, 889373469),
    (bytes(range(47)), 0xFFFFFFFF, 3277255257),
    (bytes(300), 3, 3536872948),
    (bytes(range(200)), 0xFFFFFFFFFFFFFFFF, 1863129203),
    (b"tenant:" + b"z" * 150, 0x0123456789ABCDEF, 2551740856),
]


def test_known_values(impl: Any) -> None:
    for key, seed, want in KNOWN:
        assert impl.sketch_hash(key, seed) == want


def test_every_short_length_differs(impl: Any) -> None:
    """The two-word path reads every byte of keys under 16 bytes (the first and last
    words overlap), and the length is mixed in: no two of these keys collide."""
    keys = [bytes([b]) * n for n in range(40) for b in (0, 1, 0x80, 0xFF)]
    keys += [b"ab"[:1] + bytes(n) + b"z" for n in range(20)]
    keys += [bytes(n) + bytes([1]) + bytes(14 - n) for n in range(15)]  # each byte of 15
    hs = [impl.sketch_hash(k, 9) for k in keys]
    assert len(set(hs)) == len(set(keys))


def test_not_murmur3_any_more(impl: Any) -> None:
    """Sketch placement no longer uses MurmurHash3 (the reporter's partitioning still
    does: murmur3_32 is unchanged, tests/sketch/test_mmh3.py)."""
    same = sum(
        impl.sketch_hash(b"key%d" % i, 0) == mmh3.hash(b"key%d" % i, 0, signed=False)
        for i in range(100)
    )
    assert same == 0


def test_bad_seed(impl: Any) -> None:
    for bad in (-1, 1 << 64):
        with pytest.raises(SketchError, match=r"seed must be in \[0, 2\*\*64 - 1\]$"):
            impl.sketch_hash(b"x" * 40, bad)
    with pytest.raises(TypeError, match="seed must be an int"):
        impl.sketch_hash(b"x", 1.0)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(min_size=0, max_size=400), seed=st.integers(0, (1 << 64) - 1))
def test_native_equals_twin(native_mod: Any, key: bytes, seed: int) -> None:
    from hotkeyd.sketch import _sketch_py

    assert native_mod.sketch_hash(key, seed) == _sketch_py.sketch_hash(key, seed)


def test_spread() -> None:
    """Long keys differing in one digit spread evenly over the top bits; few collide."""
    from hotkeyd.sketch import _sketch_py

    hs = [_sketch_py.sketch_hash(b"tenant:acme:cart:%024d" % i) for i in range(20000)]
    assert len(set(hs)) >= 19990
    buckets = [0] * 16
    for h in hs:
        buckets[h >> 28] += 1
    assert min(buckets) > 1100 and max(buckets) < 1400


def test_spread_short_keys() -> None:
    """12-byte keys differing in their digits spread evenly over the top bits."""
    from hotkeyd.sketch import _sketch_py

    hs = [_sketch_py.sketch_hash(b"item:%07d" % i) for i in range(20000)]
    assert len(set(hs)) >= 19990
    buckets = [0] * 16
    for h in hs:
        buckets[h >> 28] += 1
    assert min(buckets) > 1100 and max(buckets) < 1400


def test_rows_spread_short_keys() -> None:
    """Both halves of the 64-bit hash place keys: row indexes of 8-byte keys that differ
    in one byte fill a 1,000-bucket row evenly."""
    from hotkeyd.sketch import _sketch_py

    counts = [0] * 1000
    for i in range(50000):
        for idx in _sketch_py._row_indexes(_sketch_py._hash64(b"u:%06d" % i, 0), 1000, 2):
            counts[idx] += 1
    assert min(counts) > 60 and max(counts) < 145


@pytest.mark.parametrize("simd", [True, False])
def test_simd_and_scalar_paths_equal_twin(native_mod: Any, simd: bool) -> None:
    """From 128 bytes on, C sums whole groups of 8 blocks in AVX2 lanes when the CPU has
    it (the scalar loop otherwise, or with the hook off). Both equal the twin at every
    length up to 300 and around later group edges, for random, all-zero and all-0xFF
    bytes (carries through the 32-bit partial products)."""
    import random

    from hotkeyd.sketch import _sketch_py

    rnd = random.Random(23)
    lengths = [*range(301), 383, 384, 385, 511, 512, 513, 1000, 4096, 4097]
    was = native_mod._hash_simd(simd)
    try:
        for n in lengths:
            for key in (rnd.randbytes(n), bytes(n), b"\xff" * n):
                for seed in (0, (1 << 64) - 1, rnd.getrandbits(64)):
                    assert native_mod.sketch_hash(key, seed) == _sketch_py.sketch_hash(key, seed)
    finally:
        native_mod._hash_simd(was)
