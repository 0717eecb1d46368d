"""Which partition a reporter sends a key to (the same in every language: spec/vectors)."""

from __future__ import annotations

import mmh3

__all__ = ["partition_for"]


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a key is sent to: ``murmur3_32(key, seed 0, unsigned) % partitions``.

    Stable across processes, hosts and languages (never Python's ``hash()``), so every
    reporter sends a given key to the same partition.
    """
    return int(mmh3.hash(key, 0, signed=False)) % partitions
