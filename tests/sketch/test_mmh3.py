"""MurmurHash3 x86_32 must be bit-identical to mmh3.hash(key, seed, signed=False)."""

from __future__ import annotations

from typing import Any

import mmh3
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.sketch._sketch_py import _murmur3_py

KNOWN = [
    (b"", 0),
    (b"", 1),
    (b"a", 0),
    (b"ab", 0),
    (b"abc", 0),
    (b"abcd", 0),
    (b"hello world", 42),
    (b"\xff\xfe\x00\x01", 0xFFFFFFFF),
    (b"item:0000001", 0),
]


def test_known_values(impl: Any) -> None:
    for key, seed in KNOWN:
        assert impl.murmur3_32(key, seed) == mmh3.hash(key, seed, signed=False)


def test_pure_fallback_known_values() -> None:
    for key, seed in KNOWN:
        assert _murmur3_py(key, seed) == mmh3.hash(key, seed, signed=False)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64), seed=st.integers(0, 0xFFFFFFFF))
def test_random_keys(impl: Any, key: bytes, seed: int) -> None:
    want = mmh3.hash(key, seed, signed=False)
    assert impl.murmur3_32(key, seed) == want
    assert _murmur3_py(key, seed) == want


def test_str_keys_hash_as_utf8(impl: Any) -> None:
    assert impl.murmur3_32("héllo", 5) == mmh3.hash("héllo".encode(), 5, signed=False)
