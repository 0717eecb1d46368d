"""Unit tests of the shared publisher pieces and the in-memory publisher (no network)."""

from __future__ import annotations

import random
import re

import pytest

from hotkeyd.backoff import Backoff
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message
from hotkeyd.publish import (
    HotSetState,
    MemoryPublisher,
    Publisher,
    RedisPublisher,
    StdoutPublisher,
    default_instance_id,
    normalize_top,
)


def hot(key: bytes, rate: float = 100.0, db: int = 0) -> HotEntry:
    return HotEntry(key=key, rate=rate, rule="default", ttl_ms=5000, since=1.0, db=db)


def test_default_instance_id_shape_and_uniqueness() -> None:
    ids = {default_instance_id() for _ in range(20)}
    assert len(ids) > 1  # random suffix differs between calls
    for i in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]+-\d+-[0-9a-f]{4}", i), i


def test_state_applies_deltas_and_full_replaces() -> None:
    st = HotSetState("i", ManualClock())
    st.apply([hot(b"a"), hot(b"b", 5.0)], [], [])
    st.apply([], [hot(b"a", 200.0)], [CoolEntry(b"b")])
    assert [(e.key, e.rate) for e in st.hot_set()] == [(b"a", 200.0)]
    st.apply([hot(b"x"), hot(b"y")], [], [], full=True)
    assert {e.key for e in st.hot_set()} == {b"x", b"y"}
    # same key in another db is a different key
    st.apply([hot(b"x", db=3)], [], [CoolEntry(b"x", db=0)])
    assert {(e.key, e.db) for e in st.hot_set()} == {(b"y", 0), (b"x", 3)}


def test_state_seq_increments_by_one_and_snapshot_reflects_last_seq() -> None:
    clock = ManualClock()
    st = HotSetState("i", clock)
    assert st.snapshot().seq == 0
    m1 = st.delta_message([hot(b"a")], [], [])
    m2 = st.full_message()
    m3 = st.delta_message([], [], [CoolEntry(b"a")], final=True)
    assert [m.seq for m in (m1, m2, m3)] == [1, 2, 3]
    assert m2.full and not m2.final and m3.final
    assert st.snapshot().seq == 3 and st.snapshot().full
    assert m1.ts == clock.time()


def test_replace_normalizes_top_and_keeps_limit() -> None:
    st = HotSetState("i", ManualClock(), top_limit=2)
    st.replace(
        [hot(b"k")],
        [{"key": b"\xff", "rate": 1}, {"key": "b", "rate": 9.12345}, {"key": "c", "rate": 5}],
    )
    snap = st.snapshot()
    assert [t["key"] for t in snap.top] == ["b", "c"]
    assert snap.top[0]["rate"] == 9.123
    assert [e.key for e in snap.hot] == [b"k"]


def test_normalize_top_encodes_binary_keys() -> None:
    (entry,) = normalize_top([{"key": b"\xff\x00", "rate": 3.0, "rule": "r"}])
    assert entry == {"key": "/wA=", "enc": "base64", "rate": 3.0, "rule": "r"}
    with pytest.raises(TypeError):
        normalize_top([{"key": 5, "rate": 1.0}])
    with pytest.raises(TypeError, match="JSON-serializable"):
        normalize_top([{"key": "a", "rate": 1.0, "extra": object()}])


def test_backoff_is_exponential_capped_and_jittered() -> None:
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(10)]
    for n, d in enumerate(delays):
        ceiling = min(1.0, 0.1 * 2**n)
        assert ceiling / 2 <= d <= ceiling
    assert max(delays) <= 1.0
    assert len(set(delays)) == len(delays)  # jitter: no two identical
    b.reset()
    assert b.next_delay() <= 0.1
    with pytest.raises(ValueError):
        Backoff(base=0, cap=1)


def test_memory_publisher_records_messages_with_consecutive_seqs() -> None:
    clock = ManualClock()
    pub = MemoryPublisher("mem", clock, full_on_start=True)
    pub.start()
    pub.publish([hot(b"a")], [], [])
    pub.publish([], [], [])  # nothing to say: no message
    pub.publish([], [hot(b"a", 50.0)], [CoolEntry(b"zz")])
    pub.publish([], [], [CoolEntry(b"a")], final=True)
    assert [m.seq for m in pub.messages] == [1, 2, 3, 4]
    assert pub.messages[0].full and pub.messages[0].hot == ()
    assert pub.messages[2].hot[0].rate == 50.0
    assert pub.messages[-1].final
    assert pub.hot_set() == []
    assert pub.healthy
    pub.close()
    assert not pub.healthy


def test_memory_publisher_full_publish_carries_whole_set() -> None:
    pub = MemoryPublisher("mem", ManualClock())
    pub.publish([hot(b"a"), hot(b"b")], [], [])
    pub.publish([hot(b"c")], [], [], full=True)
    last = pub.messages[-1]
    assert last.full and [e.key for e in last.hot] == [b"c"]
    snap = pub.snapshot()
    assert snap.seq == last.seq and [e.key for e in snap.hot] == [b"c"]
    assert Message.loads(snap.dumps()) == snap


def test_publishers_satisfy_the_protocol() -> None:
    import io

    assert isinstance(MemoryPublisher(), Publisher)
    assert isinstance(StdoutPublisher(io.StringIO(), "i"), Publisher)
    assert isinstance(RedisPublisher("redis://127.0.0.1:1/0"), Publisher)


def test_redis_publisher_validates_arguments() -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        RedisPublisher("redis://127.0.0.1:1/0", heartbeat=0)
    with pytest.raises(ValueError, match="expiry"):
        RedisPublisher("redis://127.0.0.1:1/0", heartbeat=1.0, expiry=0.5)


def test_replacing_the_state_with_the_same_content_keeps_its_version() -> None:
    # An idle daemon replaces its state at every tick with the same (empty) hot set and
    # top list; the version must not move, or every heartbeat rewrites the snapshot.
    st = HotSetState("i", ManualClock())
    top = [{"key": b"k", "rate": 5.0}]
    st.replace([hot(b"a")], top)
    v = st.version
    for _ in range(3):
        st.replace([hot(b"a")], [{"key": b"k", "rate": 5.0}])
    assert st.version == v
    st.replace([hot(b"a")], [{"key": b"k", "rate": 6.0}])
    assert st.version == v + 1
    st.replace([hot(b"a", 101.0)], [{"key": b"k", "rate": 6.0}])
    assert st.version == v + 2
    st.replace([], [])
    assert st.version == v + 3
