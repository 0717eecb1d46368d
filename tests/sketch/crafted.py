"""The adversarial review's keys (issue 23): crafted offline against the sketch hash the
daemon used before, which had no secret (seed 0 always) and masks anyone could compute.

This is the attacker's model of that old hash, not the product's hash: it builds the
inputs of the tests, and :func:`old_hash64` checks that the crafting is right (the keys do
collide under the old hash), so a test that they no longer collide can fail.
"""

from __future__ import annotations

import random

M64 = (1 << 64) - 1
_P1 = 0xC2B2AE3D27D4EB4F
_BAD = b"\n\r\t"  # stdin is line-oriented: keep keys one line each


def _splitmix(n: int) -> list[int]:
    x, out = 0, []
    for _ in range(n):
        x = (x + 0x9E3779B97F4A7C15) & M64
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


OLD_S = _splitmix(18)  # the old hash's public masks


def _fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    return x ^ (x >> 33)


def old_hash64(key: bytes) -> int:
    """The old hash at seed 0, keys of a whole number of 16-byte blocks only."""
    assert len(key) % 16 == 0 and key
    acc = len(key) * _P1
    for i in range(len(key) // 16):
        a = int.from_bytes(key[16 * i : 16 * i + 8], "little")
        b = int.from_bytes(key[16 * i + 8 : 16 * i + 16], "little")
        r = (a ^ ((OLD_S[(2 * i) & 15] + i) & M64)) * (b ^ ((OLD_S[(2 * i + 1) & 15] - i) & M64))
        acc += (r & M64) ^ (r >> 64)
    return _fmix64(acc & M64)


def _clean(b: bytes) -> bool:
    return not any(c in b for c in _BAD)


def junk_keys(n: int, rng: random.Random, tail: bytes = b"junk:key:tail:01") -> list[bytes]:
    """``n`` 32-byte keys whose first word zeroes the old hash's first block (its product is
    0 whatever the second word), so all of them share one hash: one bucket, one count."""
    zero = OLD_S[0].to_bytes(8, "little")
    keys: set[bytes] = set()
    while len(keys) < n:
        k = zero + bytes(rng.randrange(32, 127) for _ in range(8)) + tail
        if _clean(k):
            keys.add(k)
    return sorted(keys)


def lane_twin(key: bytes) -> bytes:
    """The key whose first block has the two masked words of ``key`` swapped: the old fold
    is symmetric, so both keys have the same hash."""
    a = int.from_bytes(key[:8], "little")
    b = int.from_bytes(key[8:16], "little")
    m = OLD_S[0] ^ OLD_S[1]
    return (b ^ m).to_bytes(8, "little") + (a ^ m).to_bytes(8, "little") + key[16:]


def honest_key_with_twin(rng: random.Random) -> tuple[bytes, bytes]:
    """A 16-byte ``product:`` key and its old-hash twin, both fit for stdin."""
    while True:
        key = b"product:%08d" % rng.randrange(10**8)
        twin = lane_twin(key)
        if _clean(twin) and twin != key:
            return key, twin
