"""to_bytes/from_bytes: round trips, and corrupt input always raises SerializationError."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

from hotkeyd.errors import SerializationError


def _filled(cls: Any) -> Any:
    sk = cls(k=8, memory=4096, seed=77)
    sk.update_many([b"k%d" % (i % 23) for i in range(2000)], [1 + i % 5 for i in range(2000)])
    sk.update(b"\x00bin\xff", 12345)
    sk.update(b"", 3)
    return sk


def _recrc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def test_round_trip(cls: Any) -> None:
    sk = _filled(cls)
    b = sk.to_bytes()
    assert b[:4] == b"HKSK"
    copy = cls.from_bytes(b)
    assert copy.topk() == sk.topk()
    assert (copy.k, copy.width, copy.depth, copy.seed, copy.max_key_len) == (
        sk.k,
        sk.width,
        sk.depth,
        sk.seed,
        sk.max_key_len,
    )
    assert copy.to_bytes() == b
    assert cls.from_bytes(bytearray(b)).to_bytes() == b
    assert cls.from_bytes(memoryview(b)).to_bytes() == b
    # The copy continues exactly like the original (RNG state included).
    for s in (sk, copy):
        s.update_many([b"n%d" % i for i in range(300)])
    assert copy.to_bytes() == sk.to_bytes()


def test_empty_round_trip(cls: Any) -> None:
    sk = cls(k=1, memory=2048)
    assert cls.from_bytes(sk.to_bytes()).topk() == []


def test_every_flipped_byte_is_detected(cls: Any) -> None:
    b = _filled(cls).to_bytes()
    step = max(1, len(b) // 400)
    for i in range(0, len(b), step):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(b)
            bad[i] ^= mask
            with pytest.raises(SerializationError):
                cls.from_bytes(bytes(bad))


def test_truncated(cls: Any) -> None:
    b = _filled(cls).to_bytes()
    for n in [0, 1, 4, 10, 55, 56, 59, 60, 63, 64, len(b) // 2, len(b) - 5, len(b) - 1]:
        with pytest.raises(SerializationError):
            cls.from_bytes(b[:n])
    with pytest.raises(SerializationError):
        cls.from_bytes(b + b"\x00")


def test_wrong_magic_version_kind(impl: Any) -> None:
    hk = _filled(impl.HeavyKeeper).to_bytes()
    cm = _filled(impl.CountMinTopK).to_bytes()
    with pytest.raises(SerializationError, match="magic"):
        impl.HeavyKeeper.from_bytes(_recrc(b"XXXX" + hk[4:-4]))
    # Versions 1 (one slot per bucket), 2 (no space-eviction counter), 3 (long keys hashed
    # by MurmurHash3), 4 (short keys hashed by MurmurHash3, rows from a second mix), 5
    # (32-bit seed, unkeyed hash) and unknown future versions are rejected with the version
    # named.
    for version in (1, 2, 3, 4, 5, 7):
        with pytest.raises(
            SerializationError, match=rf"unsupported sketch version {version} \(supported: 6\)"
        ):
            impl.HeavyKeeper.from_bytes(_recrc(hk[:4] + bytes([version, 0]) + hk[6:-4]))
    with pytest.raises(SerializationError, match="kind"):
        impl.HeavyKeeper.from_bytes(cm)
    with pytest.raises(SerializationError, match="kind"):
        impl.CountMinTopK.from_bytes(hk)


def test_valid_checksum_but_inconsistent_content(cls: Any) -> None:
    """Corruption that also fixes the CRC is still caught by the structural checks."""
    b = _filled(cls).to_bytes()
    body = bytearray(b[:-4])
    k_zero = bytearray(body)
    k_zero[8:12] = b"\x00\x00\x00\x00"
    huge_width = bytearray(body)
    huge_width[12:16] = struct.pack("<I", 0xFFFFFFFF)
    size_over_k = bytearray(body)
    size_over_k[48:52] = struct.pack("<I", 9)
    bad_decay = bytearray(body)
    bad_decay[32:36] = struct.pack("<I", 26)
    for bad in (k_zero, huge_width, size_over_k, bad_decay):
        with pytest.raises(SerializationError):
            cls.from_bytes(_recrc(bytes(bad)))
    # Heap entries: break the heap order (first entry count above its children).
    sk = _filled(cls)
    table = sk.width * sk.depth * (16 if cls.__name__ == "HeavyKeeper" else 4)  # 2 slots x 8 B
    first = 60 + table
    broken = bytearray(body)
    broken[first : first + 4] = struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(SerializationError, match="top-k entries"):
        cls.from_bytes(_recrc(bytes(broken)))
    zero = bytearray(body)
    zero[first : first + 4] = b"\x00\x00\x00\x00"
    with pytest.raises(SerializationError, match="top-k entries"):
        cls.from_bytes(_recrc(bytes(zero)))


def test_duplicate_heap_keys_rejected(cls: Any) -> None:
    sk = cls(k=4, width=8, depth=1, seed=1)
    sk.update(b"aa", 2)
    sk.update(b"bb", 2)
    body = sk.to_bytes()[:-4]
    dup = body.replace(b"bb", b"aa")
    with pytest.raises(SerializationError, match="top-k entries"):
        cls.from_bytes(_recrc(dup))


def test_cross_implementation(native_mod: Any, python_mod: Any) -> None:
    for name in ("HeavyKeeper", "CountMinTopK"):
        b = _filled(getattr(native_mod, name)).to_bytes()
        assert getattr(python_mod, name).from_bytes(b).to_bytes() == b
        b2 = _filled(getattr(python_mod, name)).to_bytes()
        assert b2 == b
        assert getattr(native_mod, name).from_bytes(b2).to_bytes() == b
