"""Keys of any length: accuracy does not depend on key length, key bytes stay in budget.

The key store is a quarter of ``memory`` by default (never more than k keys of
``max_key_len``); a key that does not fit beside the others evicts the weakest entries,
so a heavy key is never refused because lighter keys hold the space (docs/sketch.md,
"Memory"). Accuracy streams run on the C core (the twin is identical by parity, checked
here on mixed-length streams too).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import PURE

EVENTS = 500_000
UNIVERSE = 1_000_000
K = 100


def _pad(i: int, length: int) -> bytes:
    """Key ``i`` padded to ``length`` bytes (distinct per id, as a real key prefix would be)."""
    return b"k:%0*d" % (length - 2, i)


def _mixed_len(i: int) -> int:
    return (12, 34, 100, 300)[(i * 2654435761 >> 7) % 4]


@pytest.fixture(scope="module")
def ids(zipf: Any) -> list[int]:
    return [int(i) for i in zipf.zipf_ids(EVENTS, UNIVERSE, 1.0, seed=1).tolist()]


_STREAMS: dict[int | None, list[bytes]] = {}


def _stream(ids: list[int], length: int | None) -> list[bytes]:
    """The stream with keys of ``length`` bytes (None: mixed); cached per module run."""
    if length in _STREAMS:
        return _STREAMS[length]
    cache: dict[int, bytes] = {}
    out = []
    for i in ids:
        key = cache.get(i)
        if key is None:
            key = cache[i] = _pad(i, _mixed_len(i) if length is None else length)
        out.append(key)
    _STREAMS[length] = out
    return out


_TRUTH: dict[int, tuple[Counter[bytes], set[bytes]]] = {}


def _precision(sk: Any, keys: list[bytes]) -> float:
    got = _TRUTH.get(id(keys))
    if got is None:
        counts = Counter(keys)
        top_keys = {k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:K]}
        got = _TRUTH[id(keys)] = (counts, top_keys)
    counts, truth = got
    top = sk.topk()
    assert all(c <= counts[k] for k, c in top)  # HeavyKeeper never overcounts
    return len({k for k, _ in top} & truth) / K


@pytest.mark.skipif(PURE, reason="1M-key streams: the twin is checked by the parity tests")
@pytest.mark.parametrize(
    ("length", "memory"),
    [(12, 65536), (34, 65536), (100, 65536), (300, 131072), (None, 131072), (34, 16384)],
)
def test_precision_does_not_depend_on_key_length(
    native_mod: Any, ids: list[int], length: int | None, memory: int
) -> None:
    """k keys of that length fit in the default share (memory / 4): same precision as 12 B.

    Mean over three sketch seeds (which keys collide changes with the key bytes, and at
    16 KiB that alone moves precision@100 by a few hundredths)."""
    keys, short_keys = _stream(ids, length), _stream(ids, 12)
    got, base = [], []
    for seed in (0, 1, 2):
        short = native_mod.HeavyKeeper(k=K, memory=memory, seed=seed)
        short.update_many(short_keys)
        base.append(_precision(short, short_keys))
        sk = native_mod.HeavyKeeper(k=K, memory=memory, seed=seed)
        sk.update_many(keys)
        assert sk.nbytes <= memory
        assert sk.key_bytes == memory // 4
        assert len(sk) == K
        assert sk.space_evictions == 0
        got.append(_precision(sk, keys))
    p, p12 = sum(got) / 3, sum(base) / 3
    assert p >= p12 - (0.01 if memory >= 65536 else 0.02), (got, base)
    assert p >= (0.99 if memory >= 65536 else 0.95), got


@pytest.mark.skipif(PURE, reason="1M-key stream: the twin is checked by the parity tests")
def test_issue_reproduction_64_byte_keys(native_mod: Any, ids: list[int]) -> None:
    """The issue's case: 64-byte keys at 1 MiB reported 50 keys at precision 0.13."""
    keys = [b"k:%062d" % i for i in ids]
    sk = native_mod.HeavyKeeper(k=K, memory=1 << 20, seed=0)
    sk.update_many(keys)
    assert len(sk.topk()) == K
    assert _precision(sk, keys) >= 0.99


def test_default_split(cls: Any) -> None:
    assert cls(k=100, memory=65536).key_bytes == 16384
    assert cls(k=100).key_bytes == 16384  # default memory 65536
    assert cls(k=100, memory=65536, max_key_len=12).key_bytes == 1200  # k * max_key_len
    assert cls(k=2, memory=65536, max_key_len=100).key_bytes == 200
    assert cls(k=100, memory=8192, max_key_len=4000).key_bytes == 4000  # one key always fits
    assert cls(k=100, width=64, depth=2, max_key_len=1024).key_bytes == 3200  # width only
    for memory in (16384, 65536, 1 << 20):
        assert cls(k=100, memory=memory).nbytes <= memory


def test_heavy_long_key_evicts_lighter_ones(cls: Any) -> None:
    """A key that does not fit beside lighter ones takes their space, and says so."""
    sk = cls(k=4, width=64, depth=2, max_key_len=100, key_bytes=100)
    for i in range(4):
        sk.update(b"s%d" % i, 5 + i)  # 4 short keys, 8 bytes
    assert len(sk) == 4 and sk.space_evictions == 0
    heavy = b"H" * 100
    sk.update(heavy, 50)
    assert sk.topk()[0] == (heavy, 50)
    assert len(sk) == 1  # every lighter entry had to go to free 100 bytes
    assert sk.space_evictions == 3  # the fourth left as the full heap's minimum
    # A lighter long key cannot displace the heavier one: it stays counted, untracked.
    sk.update(b"L" * 100, 3)
    assert sk.topk() == [(heavy, 50)]
    assert sk.estimate(b"L" * 100) in (0, 3)
    # The counter survives serialization and clear() resets it.
    again = type(sk).from_bytes(sk.to_bytes())
    assert again.space_evictions == 3 and again.topk() == sk.topk()
    sk.clear()
    assert sk.space_evictions == 0


def test_oversized_lines_are_counted(cls: Any) -> None:
    sk = cls(k=10, memory=65536, max_key_len=50)
    assert sk.update_lines(b"a\n" + b"x" * 51 + b"\nb\n" + b"y" * 10_000 + b"\n") == (2, 2, 0)


def _mixed_key() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(0, 20).map(lambda i: _pad(i, 12)),
        st.integers(0, 20).map(lambda i: _pad(i, _mixed_len(i))),
        st.integers(0, 5).map(lambda i: b"%d" % i * 300),
        st.binary(min_size=0, max_size=300).map(lambda b: b.replace(b"\n", b"")),
    )


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    k=st.integers(1, 8),
    key_bytes=st.integers(300, 1200),
    seed=st.integers(0, 2**32 - 1),
    batches=st.lists(
        st.lists(st.tuples(_mixed_key(), st.integers(0, 50)), max_size=40), max_size=6
    ),
)
def test_mixed_length_parity(
    native_mod: Any,
    python_mod: Any,
    name: str,
    k: int,
    key_bytes: int,
    seed: int,
    batches: list[list[tuple[bytes, int]]],
) -> None:
    """Keys up to max_key_len=300 in one stream: C and twin agree bit for bit."""
    if PURE:
        pytest.skip("parity needs the C core")
    kw = {"k": k, "width": 16, "depth": 2, "seed": seed, "max_key_len": 300, "key_bytes": key_bytes}
    a, b = getattr(native_mod, name)(**kw), getattr(python_mod, name)(**kw)
    rnd = random.Random(seed)
    for batch in batches:
        keys = [key for key, _ in batch]
        how = rnd.randrange(3)
        if how == 0:
            counts = [n for _, n in batch]
            a.update_many(keys, counts)
            b.update_many(keys, counts)
        elif how == 1:
            buf = b"\n".join(keys)
            assert a.update_lines(buf) == b.update_lines(buf)
        else:
            for key, n in batch:
                a.update(key, n)
                b.update(key, n)
        assert a.topk() == b.topk()
        assert a.space_evictions == b.space_evictions
        assert a.to_bytes() == b.to_bytes()
        for key in keys:
            assert a.estimate(key) == b.estimate(key)


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_runs_of_one_key_agree(native_mod: Any, python_mod: Any, name: str) -> None:
    """Back-to-back repeats skip the hash in C: same objects, equal copies, same tails."""
    if PURE:
        pytest.skip("parity needs the C core")
    a = b"A" * 92 + b"-tail-01"
    twin = b"B" * 92 + b"-tail-01"  # same length and tail, different head
    keys = [a] * 50 + [bytes(bytearray(a))] * 30 + [twin] * 20 + [a, twin] * 10 + [b""] * 5
    counts = [i % 4 for i in range(len(keys))]  # zeros in runs too
    for use_counts in (False, True):
        sks = [getattr(m, name)(k=4, memory=65536, seed=3) for m in (native_mod, python_mod)]
        for sk in sks:
            sk.update_many(keys, counts if use_counts else None)
            sk.update_lines(b"\n".join(keys[:100]))
        assert sks[0].to_bytes() == sks[1].to_bytes()
        assert sks[0].estimate(a) == sks[1].estimate(a) > 0
        assert sks[0].estimate(twin) == sks[1].estimate(twin) > 0


@pytest.mark.skipif(PURE, reason="accuracy on the C core; the twin is identical by parity")
def test_key_store_adapts_to_long_keys(native_mod: Any, ids: list[int]) -> None:
    """Issue 27: 300-byte keys at 64 KiB. The quarter for keys held ~54 of them (P@100
    0.54) though k keys plus the table fit; the store now takes bytes from the table."""
    keys = [b"k:%0298d" % i for i in ids[:150_000]]
    counts = Counter(keys)
    truth = {k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:K]}
    for cls in (native_mod.HeavyKeeper, native_mod.CountMinTopK):
        sk = cls(k=K, memory=65536, seed=0, adapt_keys=True)
        width = sk.width
        for i in range(0, len(keys), 10_000):
            sk.update_many(keys[i : i + 10_000])
        assert sk.key_bytes >= K * 300 and sk.width < width
        assert sk.nbytes <= 65536
        top = sk.topk()
        assert len(top) == K
        assert len({k for k, _ in top} & truth) / K >= 0.95


def test_key_store_grows_only_when_it_must(cls: Any) -> None:
    """Off by default for the class (the detector turns it on: hotkeyd/detector/sizing.py);
    short keys never take from the table; an explicit key_bytes is kept."""
    off = cls(k=100, memory=65536)
    w = off.width
    for i in range(2000):
        off.update(b"k:%0298d" % i, 1 + i % 7)
    assert (off.adapt_keys, off.width, off.key_bytes) == (False, w, 16384)
    short = cls(k=100, memory=65536, adapt_keys=True)
    w = short.width
    for i in range(5000):
        short.update(b"item:%07d" % i, 1 + i % 7)
    assert (short.width, short.key_bytes) == (w, 16384)
    fixed = cls(k=100, memory=65536, key_bytes=16384, adapt_keys=True)
    w = fixed.width
    for i in range(2000):
        fixed.update(b"k:%0298d" % i, 1 + i % 7)
    assert (fixed.width, fixed.key_bytes) == (w, 16384) and fixed.space_evictions > 0


def test_adapted_sketch_round_trips(cls: Any) -> None:
    """The grown store and narrower table survive to_bytes/from_bytes (header byte 7),
    and the restored sketch keeps adapting."""
    sk = cls(k=40, memory=16384, seed=3, adapt_keys=True)
    w = sk.width
    for i in range(3000):
        sk.update(b"k:%0198d" % (i % 300), 1 + i % 5)
    assert sk.width < w
    back = type(sk).from_bytes(sk.to_bytes())
    assert back.to_bytes() == sk.to_bytes()
    assert (back.width, back.key_bytes, back.adapt_keys) == (sk.width, sk.key_bytes, True)


def test_adaptive_parity_long_keys(native_mod: Any, python_mod: Any) -> None:
    """C and twin fold the table identically (same widths, cells, heap: same bytes)."""
    rng = random.Random(27)
    for name in ("HeavyKeeper", "CountMinTopK"):
        a = getattr(native_mod, name)(k=50, memory=16384, seed=9, adapt_keys=True)
        b = getattr(python_mod, name)(k=50, memory=16384, seed=9, adapt_keys=True)
        for _ in range(6):
            batch = [
                b"k:%0*d" % (rng.choice((10, 98, 298)), rng.randrange(400)) for _ in range(800)
            ]
            a.update_many(batch)
            b.update_many(batch)
            assert a.to_bytes() == b.to_bytes()
        assert a.width < getattr(native_mod, name)(k=50, memory=16384).width
