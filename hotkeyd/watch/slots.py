"""Slot ranges of a Redis Cluster node, as the watch claims them in its heartbeats:
sorted, merged ``(lo, hi)`` pairs, and their arithmetic (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Ranges = tuple[tuple[int, int], ...]


def _owned(reply: Any, node: str) -> Ranges:
    """The ranges of a ``CLUSTER SLOTS`` reply whose primary is ``node`` (host:port)."""
    out = []
    for rng in reply or ():
        primary = rng[2]
        host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
        if f"{host}:{int(primary[1])}" == node:
            out.append((int(rng[0]), int(rng[1])))
    return _merge(out)


def _merge(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for alo, ahi in a:
        for blo, bhi in b:
            lo, hi = max(alo, blo), min(ahi, bhi)
            if lo <= hi:
                out.append((lo, hi))
    return _merge(out)


def _minus(a: Ranges, b: Ranges) -> Ranges:
    """The slots of ``a`` that are not in ``b``."""
    out = []
    for lo, hi in a:
        cur = lo
        for blo, bhi in _merge(b):
            if bhi < cur or blo > hi:
                continue
            if blo > cur:
                out.append((cur, blo - 1))
            cur = max(cur, bhi + 1)
        if cur <= hi:
            out.append((cur, hi))
    return _merge(out)


def _holds(ranges: Ranges, slot: int) -> bool:
    return any(lo <= slot <= hi for lo, hi in ranges)


def _fmt(ranges: Ranges) -> str:
    return ",".join(f"{lo}-{hi}" for lo, hi in ranges) or "none"
