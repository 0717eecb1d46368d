"""No leak in the C binding: RSS stays flat over millions of calls (error paths too)."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from hotkeyd.errors import SketchError

from .conftest import PURE

pytestmark = pytest.mark.skipif(PURE, reason="the twin has no native memory to leak")

PAGE = os.sysconf("SC_PAGE_SIZE")
SLACK = 4 << 20  # allocator noise; a 4-byte leak per call over 1M calls already exceeds it


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _flat(fn: Callable[[int], None], calls: int) -> None:
    for i in range(calls // 10):  # warm up caches, pools and arenas
        fn(i)
    gc.collect()
    before = _rss()
    for i in range(calls):
        fn(i)
    gc.collect()
    grown = _rss() - before
    assert grown < SLACK, f"RSS grew by {grown} bytes over {calls} calls"


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_update_many_is_flat(native_mod: Any, name: str) -> None:
    sk = getattr(native_mod, name)(k=50, memory=16384)
    keys = [b"a", "b", bytearray(b"c"), memoryview(b"d")]
    counts = [1, 2, 3, 4]
    arr = np.array(counts, dtype=np.int64)

    def call(i: int) -> None:
        sk.update_many(keys, counts if i & 1 else arr)
        sk.update_many((b"k%d" % (i % 1000),))

    _flat(call, 1_000_000)


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_other_methods_are_flat(native_mod: Any, name: str) -> None:
    cls = getattr(native_mod, name)
    sk = cls(k=20, memory=8192)
    sk.update_many([b"x%d" % i for i in range(100)])
    lines = b"a\nb\tx\nc\t3\n" + b"z" * 2000 + b"\n"

    def call(i: int) -> None:
        sk.update(b"k%d" % (i % 500), 1 + i % 3)
        sk.update_lines(lines, counted=bool(i & 1))
        sk.topk(10)
        sk.estimate("k1")
        if i % 50 == 0:
            cls.from_bytes(sk.to_bytes())
            sk.decay(0.99)
        for bad in ((b"k", -1), (b"k", 1.5), (1, 1)):
            with contextlib.suppress(SketchError, TypeError):
                sk.update(*bad)
        with contextlib.suppress(SketchError):
            sk.update_many([b"ok", b"q" * 2000])
        with contextlib.suppress(SketchError):
            sk.update_many([b"ok"], [1, 2])
        with contextlib.suppress(SketchError):
            cls.from_bytes(b"HKSK" + b"\x00" * 70)

    _flat(call, 200_000)
