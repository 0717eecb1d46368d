"""The slot-range arithmetic the watch claims its heartbeat ``slots`` with (pure)."""

from __future__ import annotations

from hotkeyd.watch.slots import _intersect, _merge, _minus, _owned


def test_merge_intersect_minus() -> None:
    assert _merge([(5, 9), (0, 4), (20, 30), (25, 40)]) == ((0, 9), (20, 40))
    assert _intersect(((0, 5460),), ((0, 100), (200, 16383))) == ((0, 100), (200, 5460))
    assert _intersect(((0, 5460),), ()) == ()
    assert _minus(((0, 5460),), ((100, 100),)) == ((0, 99), (101, 5460))
    assert _minus(((0, 10), (20, 30)), ((5, 25),)) == ((0, 4), (26, 30))
    assert _minus(((0, 10),), ((0, 10),)) == ()
    assert _minus(((0, 10),), ()) == ((0, 10),)


def test_owned_reads_a_cluster_slots_reply() -> None:
    reply = [
        [0, 5460, [b"127.0.0.1", 7001, b"id1", {}], [b"127.0.0.1", 7004, b"id4", {}]],
        [5461, 10922, [b"127.0.0.1", 7002, b"id2", {}]],
        [10923, 16383, [b"127.0.0.1", 7001, b"id1", {}]],
    ]
    assert _owned(reply, "127.0.0.1:7001") == ((0, 5460), (10923, 16383))
    assert _owned(reply, "127.0.0.1:7004") == ()  # a replica owns nothing
    assert _owned([], "127.0.0.1:7001") == ()
