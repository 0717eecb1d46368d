"""Invariants of the hot/cool state machine under arbitrary rate sequences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.detector.rules import Rule
from hotkeyd.detector.state import HotCoolStates

THRESHOLD = 100.0
COOLDOWN = 0.5
TICK = 0.1
H = 0.8
KEYS = [b"k%d" % i for i in range(6)]
RULE = Rule("r", threshold=THRESHOLD, ttl=1.0, cooldown=COOLDOWN)

_rates = st.sampled_from([0.0, 50.0, 79.0, 81.0, 99.0, 100.0, 130.0, 200.0, 400.0])
_tick = st.fixed_dictionaries({k: _rates for k in KEYS})


@settings(max_examples=200, deadline=None)
@given(st.lists(_tick, min_size=1, max_size=40), st.integers(min_value=1, max_value=4))
def test_hot_set_invariants(ticks: list[dict[bytes, float]], max_hot: int) -> None:
    hs = HotCoolStates(max_hot, H)
    history: dict[bytes, list[float]] = {k: [] for k in KEYS}
    announced: dict[bytes, float] = {}
    for i, rates in enumerate(ticks):
        now = 100.0 + i * TICK
        before = {hk.ident: hk.rate for hk in hs}
        tr = hs.evaluate(rates, lambda _ident: RULE, now, now + 1e9)
        for k in KEYS:
            history[k].append(rates[k])
        assert len(hs) <= max_hot
        new_rates = sorted((hk.rate for hk in tr.new), reverse=True)
        for hk in tr.new:
            assert rates[hk.ident] >= THRESHOLD  # only at or above the threshold
            announced[hk.ident] = now
        for hk, reason in tr.cooled:
            assert hk.ident in before
            if reason == "cool":
                # below threshold*hysteresis on every tick of the last cool-down
                n = round(COOLDOWN / TICK) + 1
                assert all(r < THRESHOLD * H for r in history[hk.ident][-n:])
            else:
                assert reason == "evict"
                assert new_rates and new_rates[-1] * H > rates[hk.ident]
        # a hot key whose rate stays at or above threshold*h is never cooled
        for k in before:
            if rates[k] >= THRESHOLD * H:
                assert any(hk.ident == k for hk in hs) or any(
                    hk.ident == k and r == "evict" for hk, r in tr.cooled
                )
        # every hot key is (re-)announced at least every ttl/2
        for hk in tr.still:
            announced[hk.ident] = now
        for hk in hs:
            assert now - announced[hk.ident] < RULE.ttl / 2 + 1e-9
        # the cap: nothing left out beats the lowest hot key by the eviction margin
        if len(hs) == max_hot:
            lowest = min(hk.rate for hk in hs)
            for k in KEYS:
                if k not in hs and rates[k] >= THRESHOLD:
                    assert rates[k] * H <= lowest
        else:
            for k in KEYS:
                if rates[k] >= THRESHOLD:
                    assert k in hs
