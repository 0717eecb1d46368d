"""Wrong types raise TypeError; bad values raise SketchError (a ValueError) naming the range.

Pinned for both classes and both implementations, like mmh3's test_invalid_inputs.
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np
import pytest

from hotkeyd.errors import SerializationError, SketchError
from hotkeyd.sketch import new_sketch


def test_sketch_error_is_value_error() -> None:
    assert issubclass(SketchError, ValueError)
    assert issubclass(SerializationError, SketchError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0}, r"k must be in \[1, "),
        ({"k": -5}, r"k must be in \[1, "),
        ({"k": 10**30}, r"k must be in \[1, "),
        ({"memory": 100}, r"memory=100 bytes is too small for k=100"),
        ({"memory": -1}, r"too small"),
        ({"k": 1000, "memory": 16384}, r"too small for k=1000"),
        ({"width": 0}, r"width must be in \[1, "),
        ({"width": 1 << 30}, r"width must be in \[1, "),
        ({"depth": 0}, r"depth must be in \[1, 16\]"),
        ({"depth": 17}, r"depth must be in \[1, 16\]"),
        ({"seed": -1}, r"seed must be in \[0, 2\*\*64 - 1\]"),
        ({"seed": 2**64}, r"seed must be in \[0, 2\*\*64 - 1\]"),
        ({"max_key_len": 0}, r"max_key_len must be in \[1, "),
        ({"key_bytes": 10}, r"key_bytes must be in \[max_key_len=1024, "),
        ({"width": 5000, "depth": 4, "memory": 4096}, r"memory=4096 bytes is too small"),
    ],
)
def test_constructor_values(cls: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(SketchError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": "10"},
        {"k": 1.5},
        {"k": None},
        {"memory": "64k"},
        {"memory": 65536.0},
        {"width": 1.0},
        {"depth": "2"},
        {"seed": 0.0},
        {"seed": None},
        {"max_key_len": b"1"},
        {"key_bytes": []},
    ],
)
def test_constructor_types(cls: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        cls(**kwargs)


def test_nbytes_never_exceeds_memory(cls: Any) -> None:
    for memory in (4096, 16384, 65536, 100_000, 1 << 20):
        sk = cls(k=50, memory=memory)
        assert sk.nbytes <= memory
        assert sk.width >= 8


@pytest.mark.parametrize("key", [123, None, 1.5, ["a"], object()])
def test_key_types(cls: Any, key: Any) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(TypeError):
        sk.update(key)
    with pytest.raises(TypeError):
        sk.estimate(key)
    with pytest.raises(TypeError):
        sk.update_many([b"ok", key])
    assert sk.topk() == []


def test_key_too_long(cls: Any) -> None:
    sk = cls(k=4, memory=8192, max_key_len=8)
    sk.update(b"x" * 8)
    with pytest.raises(SketchError, match=r"longer than max_key_len=8 \(allowed: 0..8\)"):
        sk.update(b"x" * 9)
    with pytest.raises(SketchError, match="max_key_len=8"):
        sk.update("é" * 5)  # 10 bytes in UTF-8
    with pytest.raises(SketchError, match="index 1"):
        sk.update_many([b"a", b"y" * 9])
    with pytest.raises(SketchError, match="max_key_len=8"):
        sk.estimate(b"z" * 9)
    assert sk.topk() == [(b"x" * 8, 1)]


def test_bytes_like_keys(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    sk.update(bytearray(b"abc"))
    sk.update(memoryview(b"abc"))
    sk.update("abc")
    sk.update_many([b"abc", bytearray(b"abc"), memoryview(b"xabc")[1:]])
    assert sk.topk() == [(b"abc", 6)]
    with pytest.raises(TypeError):
        sk.update(memoryview(b"abcdef")[::2])  # not contiguous


def test_surrogate_str_key(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(UnicodeEncodeError):
        sk.update("\ud800")


@pytest.mark.parametrize("count", [-1, 2**32, 10**40, -(10**40)])
def test_count_values(cls: Any, count: int) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(SketchError, match=r"count must be in \[0, 4294967295\]"):
        sk.update(b"a", count)
    with pytest.raises(SketchError, match=r"count must be in \[0, 4294967295\]"):
        sk.update_many([b"a", b"b"], [1, count])
    assert sk.topk() == []


@pytest.mark.parametrize("count", [1.0, "1", None, b"1", [1]])
def test_count_types(cls: Any, count: Any) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(TypeError):
        sk.update(b"a", count)
    with pytest.raises(TypeError):
        sk.update_many([b"a"], [count])
    assert sk.topk() == []


def test_count_zero_and_numpy_ints(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    sk.update(b"a", 0)
    assert sk.topk() == []
    sk.update(b"a", np.int64(3))
    sk.update_many([b"a", b"b"], np.array([2, 5], dtype=np.uint32))
    sk.update_many([b"a", b"b"], np.array([1, 1], dtype=np.int8))
    sk.update_many([b"a", b"b"], np.array([256, 1], dtype=">i4"))  # byte-swapped
    sk.update_many([b"a"], memoryview(array.array("q", [4])))
    assert sk.topk() == [(b"a", 266), (b"b", 7)]


def test_update_many_arguments(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    for bad in (b"abc", "abc", bytearray(b"ab"), 42, None):
        with pytest.raises(TypeError):
            sk.update_many(bad)
    with pytest.raises(SketchError, match="lengths must match"):
        sk.update_many([b"a", b"b"], [1])
    with pytest.raises(SketchError, match="lengths must match"):
        sk.update_many([b"a"], np.array([1, 2]))
    with pytest.raises(TypeError):
        sk.update_many([b"a"], np.array([1.0]))
    with pytest.raises(TypeError):
        sk.update_many([b"a"], np.array([[1]]))
    with pytest.raises(TypeError):
        sk.update_many([b"a"], np.array(1))  # 0-d
    with pytest.raises(TypeError):
        sk.update_many([b"a"], np.array([True]))
    with pytest.raises(TypeError):
        sk.update_many([b"a"], "1")
    with pytest.raises(TypeError):
        sk.update_many([b"a"], 5)
    with pytest.raises(SketchError):
        sk.update_many([b"a", b"b"], np.array([1, -1]))
    assert sk.topk() == []  # all-or-nothing
    sk.update_many((b"a", "b"), (1, 2))
    sk.update_many(iter([b"a"]))
    sk.update_many([])
    assert sk.topk() == [(b"a", 2), (b"b", 2)]


def test_update_lines_arguments(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    for bad in ("a\nb", 42, None, [b"a"]):
        with pytest.raises(TypeError):
            sk.update_lines(bad)
    assert sk.topk() == []


def test_topk_argument(cls: Any) -> None:
    sk = cls(k=4, memory=8192)
    sk.update_many([b"a", b"b", b"b"])
    assert sk.topk(0) == []
    assert sk.topk(1) == [(b"b", 2)]
    assert sk.topk(100) == [(b"b", 2), (b"a", 1)]
    with pytest.raises(SketchError, match=r"n must be >= 0"):
        sk.topk(-1)
    with pytest.raises(TypeError):
        sk.topk("1")
    with pytest.raises(TypeError):
        sk.topk(1.0)


@pytest.mark.parametrize(
    "factor", [0, 0.0, -0.5, 1.0000001, 2, float("nan"), float("inf"), 10**400]
)
def test_decay_values(cls: Any, factor: Any) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(SketchError, match=r"decay factor must be in \(0, 1\]"):
        sk.decay(factor)


@pytest.mark.parametrize("factor", ["0.5", None, True, b"x", [0.5]])
def test_decay_types(cls: Any, factor: Any) -> None:
    sk = cls(k=4, memory=8192)
    with pytest.raises(TypeError):
        sk.decay(factor)


def test_merge_errors(impl: Any) -> None:
    a = impl.CountMinTopK(k=4, memory=8192, seed=1)
    for other in (
        impl.CountMinTopK(k=4, memory=8192, seed=2),
        impl.CountMinTopK(k=4, memory=16384, seed=1),
        impl.CountMinTopK(k=4, width=a.width, depth=a.depth + 1, seed=1),
        impl.CountMinTopK(k=4, memory=8192, seed=1, max_key_len=16),
    ):
        with pytest.raises(SketchError, match="different shape"):
            a.merge(other)
    for bad in (impl.HeavyKeeper(k=4, memory=8192, seed=1), b"x", None):
        with pytest.raises(TypeError):
            a.merge(bad)


def test_from_bytes_types(cls: Any) -> None:
    for bad in ("HKSK", 5, None):
        with pytest.raises(TypeError):
            cls.from_bytes(bad)
    with pytest.raises(SerializationError):
        cls.from_bytes(b"")


def test_new_sketch() -> None:
    hk = new_sketch("heavykeeper", k=5, memory=8192, seed=3)
    cm = new_sketch("countmin", k=5, memory=8192)
    assert (hk.k, hk.seed, cm.k) == (5, 3, 5)
    assert type(hk).__name__ == "HeavyKeeper"
    assert type(cm).__name__ == "CountMinTopK"
    with pytest.raises(SketchError, match="allowed: countmin, heavykeeper"):
        new_sketch("lossy")
    with pytest.raises(TypeError):
        new_sketch(1)  # type: ignore[arg-type]
    with pytest.raises(SketchError):
        new_sketch("countmin", k=0)


def test_the_c_module_uses_multi_phase_init() -> None:
    """PEP 489: the import system creates each module object; the exec slot fills it."""
    import importlib.util

    from hotkeyd.sketch import _sketch

    spec = _sketch.__spec__
    assert spec is not None and spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    assert not hasattr(again, "HeavyKeeper")  # a single-phase module comes back filled
    spec.loader.exec_module(again)
    assert again is not _sketch and again.HeavyKeeper is _sketch.HeavyKeeper
    with pytest.raises(SketchError):  # the error classes survive a second exec
        again.HeavyKeeper(k=0, memory=65536)
