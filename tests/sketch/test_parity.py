"""The C core and the pure-Python twin agree exactly on random operation streams.

Small tables (a few buckets, k <= 8, short keys, tight key budgets) force every
path: fingerprint collisions, weighted decay jumps, heap replacement, key-arena
admission and compaction, decay-to-zero eviction, merge and serialization.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MAX_KEY = 12

keys_st = st.one_of(
    st.sampled_from([b"", b"a", b"b", b"hot", b"\x00", b"\xff\xfe", b"x" * MAX_KEY, "é", "k"]),
    st.binary(max_size=MAX_KEY),
    st.text(max_size=4).filter(lambda s: len(s.encode()) <= MAX_KEY),
    st.integers(0, 40).map(lambda i: b"k%d" % i),
)
counts_st = st.one_of(
    st.just(1), st.integers(0, 20), st.integers(0, 0xFFFFFFFF), st.sampled_from([2**31, 2**32 - 1])
)


def _line_key() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(0, 30).map(lambda i: b"k%d" % i),
        st.binary(max_size=MAX_KEY + 3).map(lambda b: b.replace(b"\n", b"")),
    )


line_st = st.one_of(
    _line_key(),
    st.tuples(
        _line_key(), st.sampled_from([b"1", b"7", b"-1", b"x", b"", b"99999999999", b"007"])
    ).map(lambda t: t[0].replace(b"\t", b"") + b"\t" + t[1]),
)

op_st = st.one_of(
    st.tuples(st.just("update"), keys_st, counts_st),
    st.tuples(
        st.just("many"),
        st.lists(keys_st, max_size=20),
        st.booleans(),
        st.lists(counts_st, min_size=20, max_size=20),
    ),
    st.tuples(
        st.just("lines"),
        st.lists(line_st, max_size=20),
        st.booleans(),
        st.sampled_from([b"\n", b"\r\n"]),
        st.booleans(),
    ),
    st.tuples(st.just("decay"), st.sampled_from([1.0, 0.999, 0.5, 0.37, 1e-3, 1e-9])),
    st.tuples(st.just("roundtrip")),
    st.tuples(st.just("clear")),
)

shape_st = st.fixed_dictionaries(
    {
        "k": st.integers(1, 8),
        "width": st.integers(1, 24),
        "depth": st.integers(1, 4),
        "seed": st.integers(0, (1 << 64) - 1),
        "key_bytes": st.integers(MAX_KEY, 4 * MAX_KEY),
    }
)


def _pair(mods: tuple[Any, Any], name: str, shape: dict[str, Any]) -> tuple[Any, Any]:
    native = getattr(mods[0], name)(max_key_len=MAX_KEY, **shape)
    python = getattr(mods[1], name)(max_key_len=MAX_KEY, **shape)
    return native, python


@pytest.fixture(scope="module")
def mods(native_mod: Any, python_mod: Any) -> tuple[Any, Any]:
    """(native, python) implementations."""
    return native_mod, python_mod


def _assert_same(a: Any, b: Any, seen: set[bytes]) -> None:
    assert a.topk() == b.topk()
    assert len(a) == len(b)
    for key in seen:
        assert a.estimate(key) == b.estimate(key), key
    assert a.to_bytes() == b.to_bytes()


def _apply(sk: Any, op: tuple[Any, ...]) -> Any:
    kind = op[0]
    if kind == "update":
        return sk.update(op[1], op[2])
    if kind == "many":
        keys = op[1]
        return sk.update_many(keys, op[3][: len(keys)] if op[2] else None)
    if kind == "lines":
        _, lines, counted, sep, final_newline = op
        buf = sep.join(lines) + (sep if final_newline else b"")
        return sk.update_lines(buf, counted=counted)
    if kind == "decay":
        return sk.decay(op[1])
    if kind == "clear":
        return sk.clear()
    raise AssertionError(kind)


def _keys_of(op: tuple[Any, ...]) -> list[bytes]:
    def enc(k: Any) -> bytes:
        return k.encode() if isinstance(k, str) else k

    if op[0] == "update":
        return [enc(op[1])]
    if op[0] == "many":
        return [enc(k) for k in op[1]]
    if op[0] == "lines":
        return [line.rsplit(b"\t", 1)[0] for line in op[1] if len(line) <= MAX_KEY]
    return []


SETTINGS = settings(
    max_examples=int(os.environ.get("HOTKEYD_PARITY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
@SETTINGS
@given(shape=shape_st, ops=st.lists(op_st, max_size=25))
def test_random_streams_agree(
    mods: tuple[Any, Any], name: str, shape: dict[str, Any], ops: list[Any]
) -> None:
    a, b = _pair(mods, name, shape)
    seen: set[bytes] = {b"", b"hot"}
    for op in ops:
        if op[0] == "roundtrip":
            # Cross-load: each side continues from the other's serialized state.
            a, b = type(a).from_bytes(b.to_bytes()), type(b).from_bytes(a.to_bytes())
        else:
            assert _apply(a, op) == _apply(b, op)
        seen.update(_keys_of(op))
        _assert_same(a, b, seen)


@SETTINGS
@given(
    shape=shape_st,
    left=st.lists(st.tuples(keys_st, counts_st), max_size=30),
    right=st.lists(st.tuples(keys_st, counts_st), max_size=30),
)
def test_merge_agrees(
    mods: tuple[Any, Any],
    shape: dict[str, Any],
    left: list[tuple[Any, int]],
    right: list[tuple[Any, int]],
) -> None:
    a1, b1 = _pair(mods, "CountMinTopK", shape)
    a2, b2 = _pair(mods, "CountMinTopK", shape)
    for key, n in left:
        a1.update(key, n)
        b1.update(key, n)
    for key, n in right:
        a2.update(key, n)
        b2.update(key, n)
    a1.merge(a2)
    b1.merge(b2)
    seen = {k.encode() if isinstance(k, str) else k for k, _ in left + right}
    _assert_same(a1, b1, seen)
    a1.merge(a1)
    b1.merge(b1)
    _assert_same(a1, b1, seen)


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_zipf_stream_agrees(mods: tuple[Any, Any], zipf: Any, name: str) -> None:
    """A longer skewed stream with weighted updates through a small sketch."""
    keys = zipf.zipf_keys(20_000, universe=5_000, alpha=1.0, seed=3)
    a = getattr(mods[0], name)(k=50, memory=8192, seed=11)
    b = getattr(mods[1], name)(k=50, memory=8192, seed=11)
    counts = [1 + (i % 7) * (i % 3) for i in range(len(keys))]
    a.update_many(keys, counts)
    b.update_many(keys, counts)
    buf = b"\n".join(keys[:5000])
    assert a.update_lines(buf) == b.update_lines(buf)
    a.decay(0.75)
    b.decay(0.75)
    _assert_same(a, b, set(keys[:500]))


def _phased_stream(n_low: int, seed: int) -> tuple[list[bytes], list[int]]:
    """Low skew (almost every key new: direct mode), then a storm of a few keys with runs of
    one long key (aggregating, the run shortcut), then low skew again; lengths 8-300 bytes."""
    import random

    rnd = random.Random(seed)

    def key(i: int) -> bytes:
        n = (8, 12, 34, 47, 48, 100, 300)[i % 7]
        return (b"k:%d:" % i).ljust(n, b"-")[:n] if n >= 12 else b"%08d" % (i % 10**8)

    keys = [key(rnd.randrange(10**6)) for _ in range(n_low)]
    hot = [key(i) for i in range(5)]
    for _ in range(n_low // 2):
        k = rnd.choice(hot)
        keys.extend([k] * rnd.randint(1, 4))
    keys += [key(rnd.randrange(10**6)) for _ in range(n_low)]
    counts = [rnd.choice((0, 1, 1, 1, 2, 9)) for _ in keys]
    return keys, counts


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_direct_mode_agrees(mods: tuple[Any, Any], name: str) -> None:
    """Batches long enough to switch between aggregated rounds and direct mode (and back)
    give identical sketches in C and the twin, for update_many (with and without counts,
    zero counts included) and update_lines."""
    keys, counts = _phased_stream(30_000, seed=5)
    a = getattr(mods[0], name)(k=64, memory=32768, seed=3, max_key_len=300)
    b = getattr(mods[1], name)(k=64, memory=32768, seed=3, max_key_len=300)
    for sk in (a, b):
        sk.update_many(keys)
        sk.update_many(keys, counts)
        sk.update_lines(b"\n".join(keys))
    _assert_same(a, b, set(keys[:300]) | set(keys[-300:]))


def test_direct_mode_rule(python_mod: Any) -> None:
    """The rule itself (same constants in C): a full round of mostly distinct keys sends
    the next DIRECT_SPAN events straight to the sketch, one update each; then a new round
    measures again. A skewed stream stays aggregated."""
    applied: list[tuple[bytes, int]] = []

    class Recording(python_mod.HeavyKeeper):
        def _update_one(self, key: bytes, n: int) -> None:
            applied.append((key, n))

    cap, span = python_mod.AGG_CAP, python_mod.DIRECT_SPAN
    distinct = [b"d%d" % i for i in range(cap + span)]
    # A full round of distinct keys, then direct mode: x is applied twice, not summed;
    # after span events a new round sums again (z twice -> one update of 2).
    stream = [*distinct[:cap], b"x", b"y", b"x", *distinct[cap : cap + span - 3], b"z", b"z"]
    Recording(k=8, memory=16384).update_many(stream)
    assert applied[:cap] == [(k, 1) for k in distinct[:cap]]
    assert applied[cap : cap + 3] == [(b"x", 1), (b"y", 1), (b"x", 1)]
    assert applied[cap + span :] == [(b"z", 2)]
    assert len(applied) == cap + span + 1

    applied.clear()
    skewed = [b"h%d" % (i % 64) for i in range(3 * cap)] + distinct[: cap + 100]
    Recording(k=8, memory=16384).update_many(skewed)
    # The 64 hot keys share the first round with the first cap - 64 distinct keys, then
    # the next round; no direct mode (that round repeats a lot).
    assert applied[:64] == [(b"h%d" % i, 3 * cap // 64) for i in range(64)]
    assert len(applied) == len(set(skewed))


@pytest.mark.parametrize("events", [6553, 6554])  # 4,096 * 8 / 5 = 6553.6: the rule's edge
@pytest.mark.parametrize("how", ["many", "lines"])
def test_direct_mode_edges_agree(mods: tuple[Any, Any], events: int, how: str) -> None:
    """The edges of the mode switch, in C as in the twin: a full round of exactly
    ``events`` events (direct mode from 6,553, not from 6,554), the next round's key
    arriving, repeats right after the switch (summed only when aggregating), a direct span
    ending exactly (32,768 events, then a round that sums again), and a batch that ends
    on a full round. Tiny tables and counts of 25 (foreign counters that decay slowly, so
    each update draws): unit and summed updates leave different generator states."""
    import random

    rnd = random.Random(events)
    cap = mods[1].AGG_CAP
    full = [b"r%d" % i for i in range(cap)]
    round1 = list(full)
    for _ in range(events - cap):  # repeats spread through the round, first key first
        round1.insert(rnd.randrange(1, len(round1) + 1), rnd.choice(full))
    after = [b"x", b"y", b"x", b"x" * 60, b"x" * 60, b"y"]
    span = [b"s%d" % (i % 7000) for i in range(mods[1].DIRECT_SPAN - len(after))]
    tail = [b"z", b"z", b"w" * 50, b"w" * 50, *(b"t%d" % i for i in range(cap))]
    stream = round1 + after + span + tail
    a = mods[0].HeavyKeeper(k=4, width=8, depth=2, seed=7, max_key_len=64)
    b = mods[1].HeavyKeeper(k=4, width=8, depth=2, seed=7, max_key_len=64)
    for sk in (a, b):
        if how == "many":
            sk.update_many(stream, [25] * len(stream))
        else:
            sk.update_lines(b"".join(k + b"\t25\n" for k in stream), counted=True)
    _assert_same(a, b, {b"x", b"y", b"z", b"w" * 50, b"x" * 60})


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_long_key_hash_memo_agrees(mods: tuple[Any, Any], name: str) -> None:
    """update_many takes the hash of a long bytes or str key met again in the same call
    from a memo keyed on the data pointer. More distinct long keys than the memo has slots
    (so slots are shared and overwritten), equal keys in distinct objects, str and bytes of
    the same text, lengths on both sides of the memo's 64 bytes, and buffer keys (never
    memoized) in one call: the same sketch as the twin, which has no memo."""
    import random

    rnd = random.Random(27)

    def key(i: int) -> bytes:
        n = (63, 64, 100, 300)[i % 4]
        return (b"long:%d:" % i).ljust(n, b"=")

    pool = [key(i) for i in range(12_000)]
    stream: list[Any] = []
    for _ in range(40_000):
        i = min(int(rnd.paretovariate(1.0)) - 1, len(pool) - 1)  # heavy head, long tail
        k: Any = pool[i] if rnd.random() < 0.9 else pool[rnd.randrange(len(pool))]
        r = rnd.random()
        if r < 0.05:
            k = bytes(bytearray(k))  # equal bytes, another object
        elif r < 0.10:
            k = k.decode()
        elif r < 0.12:
            k = memoryview(bytearray(k))
        stream.append(k)
    a = getattr(mods[0], name)(k=64, memory=65536, seed=5, max_key_len=300)
    b = getattr(mods[1], name)(k=64, memory=65536, seed=5, max_key_len=300)
    counts = [1 + i % 3 for i in range(len(stream))]
    # Fresh objects for every event: the memo misses, and the call stops probing it.
    fresh = [bytes(bytearray(k)) if isinstance(k, bytes) else k for k in stream]
    for sk in (a, b):
        sk.update_many(stream)
        sk.update_many(stream, counts)
        sk.update_many(fresh + stream)
    _assert_same(a, b, set(pool[:200]) | set(pool[-200:]))


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_memo_entries_across_rounds_and_direct_mode(mods: tuple[Any, Any], name: str) -> None:
    """A memo hit adds to the aggregation entry its key took earlier in the same round.
    Phases of the same long key objects: a hot few (aggregating rounds, hits), then
    thousands of distinct keys with few repeats (full rounds: direct mode, where hits must
    not add to an entry), then the hot few again (a new round after direct mode drains):
    the same sketch as the twin."""
    import random

    rnd = random.Random(31)
    pool = [(b"memo:%d:" % i).ljust(100, b"#") for i in range(20_000)]
    hot = pool[:8]
    stream: list[bytes] = []
    for phase in range(3):
        for _ in range(30_000):
            if phase == 1 and rnd.random() < 0.9:
                stream.append(pool[rnd.randrange(8, len(pool))])
            else:
                stream.append(hot[rnd.randrange(len(hot))])
    a = getattr(mods[0], name)(k=16, memory=65536, seed=9, max_key_len=100)
    b = getattr(mods[1], name)(k=16, memory=65536, seed=9, max_key_len=100)
    for sk in (a, b):
        sk.update_many(stream)
        sk.update_many(stream, [1 + i % 4 for i in range(len(stream))])
    _assert_same(a, b, set(hot) | set(pool[8:208]))
