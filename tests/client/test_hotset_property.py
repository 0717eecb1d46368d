"""Property: whatever messages are lost, the hot set equals the daemon's state at the
client's last applied seq (resyncing from snapshots taken at or after the gap)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.client import ApplyResult, HotSet
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message

KEYS = [b"a", b"b", b"c", b"d", b"\xff"]

ops = st.lists(
    st.tuples(st.booleans(), st.sampled_from(KEYS), st.booleans(), st.integers(0, 3)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_state_matches_daemon_at_last_seq(steps: list[tuple[bool, bytes, bool, int]]) -> None:
    # The daemon: states[seq] = hot keys after message seq.
    states: list[frozenset[bytes]] = [frozenset()]
    msgs: list[Message] = [Message(instance="d", seq=0, ts=0.0, full=True)]
    for make_hot, key, _lost, _lag in steps:
        cur = set(states[-1])
        seq = len(states)
        if make_hot:
            cur.add(key)
            m = Message(instance="d", seq=seq, ts=float(seq), hot=(HotEntry(key, 1.0, "r", 10**9),))
        else:
            cur.discard(key)
            m = Message(instance="d", seq=seq, ts=float(seq), cool=(CoolEntry(key),))
        states.append(frozenset(cur))
        msgs.append(m)

    def snapshot(at: int) -> Message:
        hot = tuple(HotEntry(k, 1.0, "r", 10**9) for k in sorted(states[at]))
        return Message(instance="d", seq=at, ts=float(at), hot=hot, full=True)

    hs = HotSet(ManualClock())
    assert hs.apply(snapshot(0)) is ApplyResult.APPLIED
    for i, (_h, _k, lost, lag) in enumerate(steps, start=1):
        if lost:
            continue
        res = hs.apply(msgs[i])
        if res is ApplyResult.GAP:
            # The snapshot read during the resync is at least as new as this message.
            hs.apply(snapshot(min(i + lag, len(states) - 1)))
            res = hs.apply(msgs[i])
            assert res is not ApplyResult.GAP
        last = hs.last_seq("d")
        assert last is not None
        assert set(hs.keys()) == states[last]
