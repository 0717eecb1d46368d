"""The sketches' key hash (sketch_hash): MurmurHash3 under 32 bytes, the multiply-fold
hash (native/keyhash.c, _sketch_py._long_hash) from 32 bytes; C and twin bit-identical."""

from __future__ import annotations

from typing import Any

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.errors import SketchError

# Pinned, so C and twin cannot drift together (values of the spec in native/keyhash.c).
KNOWN = [
    (b"a" * 32, 0, 3345955846),
    (b"session:" + b"0" * 36, 0, 1701899664),
    (b"k:%098d" % 7, 1, 2576979119),
    (bytes(range(47)), 0xFFFFFFFF, 782734875),
    (bytes(300), 3, 1042118825),
]


def test_known_values(impl: Any) -> None:
    for key, seed, want in KNOWN:
        assert impl.sketch_hash(key, seed) == want


def test_short_keys_are_murmur3(impl: Any) -> None:
    for n in range(32):
        key = bytes(range(n))
        assert impl.sketch_hash(key, 9) == mmh3.hash(key, 9, signed=False)


def test_bad_seed(impl: Any) -> None:
    with pytest.raises(SketchError, match="seed"):
        impl.sketch_hash(b"x" * 40, 1 << 32)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(min_size=28, max_size=400), seed=st.integers(0, 0xFFFFFFFF))
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
