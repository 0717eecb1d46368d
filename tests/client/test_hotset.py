"""HotSet sequence logic, merging, TTL expiry and callbacks (no I/O, ManualClock)."""

from __future__ import annotations

import pytest

from hotkeyd.client import ApplyResult, HotSet
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message


def hot(key: bytes, ttl_ms: int = 1000) -> HotEntry:
    return HotEntry(key=key, rate=100.0, rule="r", ttl_ms=ttl_ms)


def msg(
    seq: int,
    hot_keys: tuple[bytes, ...] = (),
    cool: tuple[bytes, ...] = (),
    *,
    inst: str = "a",
    full: bool = False,
    final: bool = False,
    ttl_ms: int = 1000,
    ts: float = 0.0,
) -> Message:
    return Message(
        instance=inst,
        seq=seq,
        ts=ts or float(seq),
        hot=tuple(hot(k, ttl_ms) for k in hot_keys),
        cool=tuple(CoolEntry(k) for k in cool),
        full=full,
        final=final,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_in_order_messages_apply_and_duplicates_are_stale(clock: ManualClock) -> None:
    hs = HotSet(clock)
    assert hs.apply(msg(1, full=True)) is ApplyResult.APPLIED
    assert hs.apply(msg(2, (b"k1",))) is ApplyResult.APPLIED
    assert b"k1" in hs
    assert hs.apply(msg(2, (b"k2",))) is ApplyResult.STALE
    assert b"k2" not in hs
    assert hs.apply(msg(3, cool=(b"k1",))) is ApplyResult.APPLIED
    assert b"k1" not in hs
    assert hs.last_seq("a") == 3


def test_gap_is_reported_and_changes_nothing_until_forced(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(1, full=True))
    assert hs.apply(msg(3, (b"k",))) is ApplyResult.GAP
    assert b"k" not in hs and hs.last_seq("a") == 1
    assert hs.apply(msg(3, (b"k",)), force=True) is ApplyResult.APPLIED
    assert b"k" in hs and hs.last_seq("a") == 3


def test_unknown_instance_non_full_message_asks_for_resync(clock: ManualClock) -> None:
    hs = HotSet(clock)
    assert hs.apply(msg(7, (b"k",), inst="new")) is ApplyResult.GAP


def test_full_message_replaces_only_that_instance(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(1, (b"a1", b"shared"), inst="a", full=True))
    hs.apply(msg(1, (b"b1", b"shared"), inst="b", full=True))
    hs.apply(msg(2, (b"a2",), inst="a", full=True))
    assert sorted(hs.keys()) == [b"a2", b"b1", b"shared"]  # shared still held by b
    hs.apply(msg(2, (), inst="b", full=True))
    assert sorted(hs.keys()) == [b"a2"]


def test_snapshot_older_than_applied_state_is_stale(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(5, (b"k",), full=True, ts=100.0))
    assert hs.apply(msg(4, (), full=True, ts=99.0)) is ApplyResult.STALE
    assert b"k" in hs


def test_restarted_daemon_with_same_id_is_accepted(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(50, (b"old",), full=True, ts=100.0))
    assert hs.apply(msg(1, (b"new",), full=True, ts=200.0)) is ApplyResult.APPLIED
    assert hs.keys() == [b"new"]


def test_ttl_expiry_follows_the_clock_and_reannouncement_extends(clock: ManualClock) -> None:
    cooled: list[bytes] = []
    hs = HotSet(clock, on_cool=cooled.append)
    hs.apply(msg(1, (b"k",), full=True, ttl_ms=1000))
    clock.advance(0.8)
    hs.apply(msg(2, (b"k",), ttl_ms=1000))  # re-announced: lives until 1.8
    clock.advance(0.5)
    assert hs.expire() == 0 and b"k" in hs
    clock.advance(0.6)
    assert hs.get(b"k") is None  # lazily expired before the sweep
    assert hs.expire() == 1 and cooled == [b"k"] and len(hs) == 0


def test_final_keeps_entries_until_ttl(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(1, (b"k",), full=True, ttl_ms=2000))
    hs.apply(msg(2, final=True))
    clock.advance(1.0)
    hs.expire()
    assert b"k" in hs
    clock.advance(1.5)
    hs.expire()
    assert b"k" not in hs
    assert "a" not in hs.instances()  # a gone instance with no keys is forgotten


def test_key_cools_only_when_no_instance_holds_it(clock: ManualClock) -> None:
    hs = HotSet(clock)
    hs.apply(msg(1, (b"k",), inst="a", full=True))
    hs.apply(msg(1, (b"k",), inst="b", full=True))
    hs.apply(msg(2, cool=(b"k",), inst="a"))
    assert b"k" in hs
    hs.apply(msg(2, cool=(b"k",), inst="b"))
    assert b"k" not in hs


def test_callbacks_fire_on_transitions_only_and_errors_are_contained(clock: ManualClock) -> None:
    events: list[tuple[str, bytes]] = []

    def boom(_: object) -> None:
        raise RuntimeError("callback bug")

    hs = HotSet(
        clock,
        on_hot=lambda e: events.append(("hot", e.key)),
        on_cool=lambda k: events.append(("cool", k)),
    )
    hs.add_listener(on_hot=boom)
    hs.apply(msg(1, (b"k",), full=True))
    hs.apply(msg(2, (b"k",)))  # re-announcement: no callback
    hs.apply(msg(3, cool=(b"k",)))
    assert events == [("hot", b"k"), ("cool", b"k")]
    assert hs.callback_errors == 1


def test_memory_is_bounded_by_max_keys(clock: ManualClock) -> None:
    hs = HotSet(clock, max_keys=10)
    hs.apply(msg(1, tuple(f"k{i}".encode() for i in range(50)), full=True))
    assert len(hs) == 10 and hs.dropped == 40


def test_binary_keys_round_trip_through_the_wire(clock: ManualClock) -> None:
    key = b'\xff\x00 spaces "quotes"\n'
    hs = HotSet(clock)
    hs.apply(Message.loads(msg(1, (key,), full=True).dumps()))
    assert key in hs


def test_rejects_bad_bound() -> None:
    with pytest.raises(ValueError, match="max_keys"):
        HotSet(max_keys=0)


def test_crashed_instances_are_forgotten_once_idle(clock: ManualClock) -> None:
    """Daemons that die without `final` (or pods with fresh ids) must not pile up."""
    hs = HotSet(clock, forget_idle=60.0)
    for i in range(2000):
        hs.apply(msg(1, (b"k%d" % i,), inst=f"pod-{i}", full=True))
    assert len(hs.instances()) == 2000
    clock.advance(2.0)  # every TTL (1 s) has passed: keys cool, instances still remembered
    hs.expire()
    assert len(hs) == 0 and len(hs.instances()) == 2000
    clock.advance(60.0)
    hs.expire()
    assert hs.instances() == [] and hs.forgotten == 2000
    # A forgotten instance's next delta is a gap (resync from the snapshot), not applied blindly.
    assert hs.apply(msg(2, (b"x",), inst="pod-7")) is ApplyResult.GAP


def test_instance_count_is_capped_keeping_those_with_keys(clock: ManualClock) -> None:
    hs = HotSet(clock, max_instances=100)
    hs.apply(msg(1, (b"held",), inst="keeper", full=True, ttl_ms=10_000_000))
    for i in range(500):
        hs.apply(msg(1, (), inst=f"empty-{i}", full=True))
    assert len(hs.instances()) <= 101
    assert "keeper" in hs.instances() and b"held" in hs
    # beyond the cap a new instance is refused (an idle one is forgotten at most once a
    # second to make room: a flood of forged ids cannot cost a scan each)
    assert hs.forgotten + hs.refused >= 400


def test_a_key_is_its_bytes_and_its_db() -> None:
    """A cool of a key in db 1 used to remove the same key name hot in db 0."""
    from hotkeyd.clock import ManualClock
    from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message

    hs = HotSet(ManualClock())
    cooled: list[bytes] = []
    hs.add_listener(on_cool=cooled.append)
    both = (
        HotEntry(key=b"k", rate=10.0, rule="r", ttl_ms=60_000, since=1.0, db=0),
        HotEntry(key=b"k", rate=20.0, rule="r", ttl_ms=60_000, since=1.0, db=1),
    )
    hs.apply(Message(instance="i", seq=1, ts=1.0, hot=both, full=True))
    assert hs.get(b"k") is not None and hs.get(b"k", db=1) is not None
    entry = hs.get(b"k")
    assert entry is not None and entry.db == 0 and entry.rate == 10.0
    hs.apply(Message(instance="i", seq=2, ts=2.0, cool=(CoolEntry(key=b"k", rule="r", db=1),)))
    assert hs.get(b"k", db=1) is None
    assert hs.get(b"k") is not None and b"k" in hs  # db 0's claim is untouched
    assert hs.keys() == [b"k"] and hs.keys(db=1) == []
    assert cooled == [b"k"]
