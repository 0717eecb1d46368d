"""window_sums: one call per evaluation for a key's count over the sub-window sketches.

Each implementation's ``window_sums`` on its own sketches; the C core and the twin give
the same floats and leave the same caches (parity); cached counts win over estimates;
factors scale each sketch's counts; bad arguments are refused.
"""

from __future__ import annotations

import random
from typing import Any

import pytest


def _slots(cls: Any, n: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sk = cls(k=16, memory=4096, seed=3)
        for _ in range(2000):
            sk.update(b"k%d" % min(int(rng.paretovariate(1.1)), 300), rng.randint(1, 3))
        if i == 1:
            sk.update(b"only-in-one", 500)
        out.append(sk)
    return out


def _keys() -> list[bytes]:
    return [b"k%d" % i for i in range(0, 320, 3)] + [b"only-in-one", b"never", b""]


def test_sums_are_counts_times_factors(cls: Any, impl: Any) -> None:
    sks = _slots(cls, 4, seed=1)
    keys = _keys()
    factors = [1.0, 2.5, 1.0, 0.5]
    caches: list[dict[bytes, int]] = [{} for _ in sks]
    got = impl.window_sums(sks, caches, factors, keys)
    want = [sum(sk.estimate(k) * f for sk, f in zip(sks, factors, strict=True)) for k in keys]
    assert got == pytest.approx(want)
    assert got[keys.index(b"only-in-one")] >= 500 * 2.5
    assert got[keys.index(b"never")] == 0.0
    assert all(set(c) == set(keys) for c in caches)  # every estimate is cached


def test_cached_counts_win(cls: Any, impl: Any) -> None:
    sks = _slots(cls, 2, seed=2)
    caches: list[dict[bytes, int]] = [{b"k1": 7}, {}]
    got = impl.window_sums(sks, caches, [1.0, 1.0], [b"k1"])
    assert got == [7.0 + sks[1].estimate(b"k1")]


def test_native_and_twin_agree(native_mod: Any) -> None:
    from hotkeyd.sketch import _sketch_py

    for name in ("HeavyKeeper", "CountMinTopK"):
        res = []
        for mod in (native_mod, _sketch_py):
            sks = _slots(getattr(mod, name), 5, seed=4)
            caches: list[dict[bytes, int]] = [{} for _ in sks]
            caches[2][b"k3"] = 11
            res.append((mod.window_sums(sks, caches, [1.0, 0.3, 1.0, 1.7, 1.0], _keys()), caches))
        assert res[0] == res[1], name


def test_bad_arguments(cls: Any, impl: Any) -> None:
    sks = _slots(cls, 2, seed=5)
    with pytest.raises(ValueError):
        impl.window_sums(sks, [{}], [1.0, 1.0], [b"a"])
    with pytest.raises(ValueError):
        impl.window_sums(sks, [{}, {}], [1.0], [b"a"])
    assert impl.window_sums([], [], [], [b"a", b"b"]) == [0.0, 0.0]
    assert impl.window_sums(sks, [{}, {}], [1.0, 1.0], []) == []
