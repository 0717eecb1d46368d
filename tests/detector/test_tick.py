"""The per-tick work (candidates, rates, contenders): the C core and its twin in parity.

``evaluate`` is run on real sub-window sketches fed random streams, through each
implementation, and both must give the same floats, the same contenders in the same order
and leave the same estimate caches; the detector driven by each over a random stream must
make the same transitions. With ``HOTKEYD_PURE_PYTHON=1`` only the twin runs.
"""

from __future__ import annotations

import copy
import os
import random
import types
from typing import Any

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig, _tick_py
from hotkeyd.detector import detector as detector_mod
from hotkeyd.detector.rules import parse_rules
from hotkeyd.sketch import HeavyKeeper, window_sums

PURE = os.environ.get("HOTKEYD_PURE_PYTHON", "") not in ("", "0")


def _native() -> types.ModuleType:
    try:
        from hotkeyd.detector import _tick
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"hotkeyd.detector._tick is required in CI: {exc}")
        pytest.skip(f"hotkeyd.detector._tick not built ({exc})")
    return _tick


@pytest.fixture(params=["python"] if PURE else ["native", "python"])
def impl(request: pytest.FixtureRequest) -> Any:
    return _native() if request.param == "native" else _tick_py


def _lane(rng: random.Random, slots: int, universe: int) -> tuple[Any, ...]:
    sketches, tops, factors = [], [], []
    for _ in range(slots):
        sk = HeavyKeeper(k=32, memory=8192, seed=5)
        n = rng.randint(0, 3000)
        keys = [b"k%d" % min(int(rng.paretovariate(1.0)), universe) for _ in range(n)]
        keys += [b"burst"] * rng.choice([0, 0, 400])
        if keys:
            sk.update_many(keys)
        sketches.append(sk)
        tops.append(dict(sk.topk()))
        factors.append(rng.choice([1.0, 1.0, 2.5, 0.75]))
    caches: list[dict[bytes, int]] = [{} for _ in sketches]
    return (window_sums, sketches, caches, factors, tops, [sk.k for sk in sketches])


def _copy(lanes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The same sketches, with caches of their own (the only thing evaluate writes)."""
    return [(f, sk, copy.deepcopy(c), fac, tops, ks) for f, sk, c, fac, tops, ks in lanes]


@pytest.mark.parametrize("seed", range(12))
def test_c_and_twin_agree_on_random_streams(seed: int) -> None:
    native = _native() if not PURE else pytest.skip("needs the C core")
    rng = random.Random(seed)
    lanes = [
        _lane(rng, rng.randint(0, 10), rng.choice([50, 2000])) for _ in range(rng.randint(1, 3))
    ]
    hot = [b"k1", b"never-seen", b"burst"][: rng.randint(0, 3)]
    for prune in (False, True):
        need = rng.choice([50.0, 400.0, 3000.0])
        args = (hot, need, prune, need / 2, 1.0, rng.choice([8, 10_000]), not prune)
        a, b = _copy(lanes), _copy(lanes)
        got_c = native.evaluate(a, *args)
        got_py = _tick_py.evaluate(b, *args)
        assert list(got_c[0].items()) == list(got_py[0].items())
        assert got_c[1] == got_py[1]
        assert [lane[2] for lane in a] == [lane[2] for lane in b]


def _exact_lane(slots: list[dict[bytes, int]], k: int = 3) -> tuple[Any, ...]:
    from hotkeyd.sketch._sketch_py import window_sums as sums_py
    from hotkeyd.testing import ExactSketch

    sketches = []
    for counts in slots:
        sk = ExactSketch(k=k)
        for key, c in counts.items():
            sk.update(key, c)
        sketches.append(sk)
    tops = [dict(sk.topk()) for sk in sketches]
    return (sums_py, sketches, [{} for _ in slots], [1.0] * len(slots), tops, [k] * len(slots))


def test_rates_and_contenders(impl: Any) -> None:
    lane = _exact_lane([{b"a": 60, b"b": 30, b"c": 5}, {b"a": 40, b"d": 50}])
    rates, contenders = impl.evaluate([lane], [b"h"], 0.0, False, 50.0, 0.5, 1000, True)
    assert rates == {b"a": 50.0, b"b": 15.0, b"c": 2.5, b"d": 25.0, b"h": 0.0}
    assert contenders == [b"a"]  # at or above 50/s, not hot; the hot key is rated at 0


def test_a_threshold_exactly_reached_is_a_contender(impl: Any) -> None:
    lane = _exact_lane([{b"a": 100}])
    assert impl.evaluate([lane], [], 0.0, False, 100.0, 1.0, 1000, True)[1] == [b"a"]


def test_pruning_keeps_only_keys_that_can_reach_the_need(impl: Any) -> None:
    # Full top-3s (floors 10 and 10): a key must be 40 over a floor in one slot to reach 100.
    lane = _exact_lane([{b"a": 90, b"b": 20, b"c": 10}, {b"a": 50, b"d": 51, b"e": 10}])
    rates, contenders = impl.evaluate([lane], [], 100.0, True, 100.0, 1.0, 1000, False)
    assert set(rates) == {b"a"} and contenders == [b"a"]
    rates, _ = impl.evaluate([lane], [], 100.0, True, 100.0, 1.0, 1000, True)
    assert set(rates) == {b"a", b"d"}  # d may reach it (51 - 10 >= 40): rated, not hot


def test_the_top_counts_go_into_the_caches(impl: Any) -> None:
    lane = _exact_lane([{b"a": 7, b"b": 3}])
    lane[2][0][b"a"] = 99  # an estimate already cached stays
    impl.evaluate([lane], [], 0.0, False, 1.0, 1.0, 1000, True)
    assert lane[2][0] == {b"a": 99, b"b": 3}


def test_bad_lanes_are_refused(impl: Any) -> None:
    with pytest.raises(TypeError):
        impl.evaluate([(1, 2)], [], 0.0, False, 1.0, 1.0, 10, True)
    lane = list(_exact_lane([{b"a": 1}]))
    lane[3] = []
    with pytest.raises(ValueError):
        impl.evaluate([tuple(lane)], [], 0.0, False, 1.0, 1.0, 10, True)


def _run(monkeypatch: pytest.MonkeyPatch, impl: Any, seed: int, rate_all: bool) -> list[Any]:
    monkeypatch.setattr(detector_mod, "_tick", impl)
    rng = random.Random(seed)
    clock = ManualClock()
    rules = parse_rules("[default]\nthreshold = 300\nttl = 2\ncooldown = 0.5\n")
    det = Detector(DetectorConfig(k=16, memory=64 * 1024), rules, clock, rate_all=rate_all)
    out: list[Any] = []
    for step in range(60):
        hot = b"burst%d" % (step // 20)
        keys = [b"bg%d" % min(int(rng.paretovariate(1.2)), 5000) for _ in range(400)]
        keys += [hot] * rng.randint(0, 60)
        det.ingest(Batch(keys=keys, source="test"))
        clock.advance(0.1)
        res = det.tick()
        out.append([(t.kind, t.key, t.reason, t.rate) for t in res.transitions])
        out.append([(e.key, e.rate) for e in det.top(10)])
    return out


@pytest.mark.parametrize("rate_all", [True, False])
def test_the_detector_makes_the_same_transitions_with_either(
    monkeypatch: pytest.MonkeyPatch, rate_all: bool
) -> None:
    native = _native() if not PURE else pytest.skip("needs the C core")
    want = _run(monkeypatch, _tick_py, 3, rate_all)
    assert any(step for step in want[::2])  # the bursts turned hot and cooled
    assert _run(monkeypatch, native, 3, rate_all) == want


def test_may_cross_bounds_by_the_closed_top_k(impl: Any) -> None:
    # Closed sub-windows: one full top-2 (floor 5), one listing b; factors 1 and 2.
    tops = [{b"x": 9, b"y": 5}, {b"b": 40}]
    open_top = {b"a": 60, b"b": 10, b"c": 80}
    got = impl.may_cross(open_top, 1.0, tops, [2, 3], [1.0, 2.0], 70.0)
    # a: 60 + 5 (floor) + 0 (not full) = 65; b: 10 + 5 + 80 = 95; c: 80 alone.
    assert got == {b"b": 10, b"c": 80}
    with pytest.raises(ValueError):
        impl.may_cross(open_top, 1.0, tops, [2], [1.0, 2.0], 70.0)


@pytest.mark.parametrize("seed", range(6))
def test_may_cross_c_and_twin_agree(seed: int) -> None:
    native = _native() if not PURE else pytest.skip("needs the C core")
    rng = random.Random(seed)
    lane = _lane(rng, rng.randint(1, 10), rng.choice([50, 2000]))
    _, _, _, factors, tops, ks = lane
    need = rng.choice([10.0, 100.0, 1000.0])
    args = (tops[0], factors[0], tops[1:], ks[1:], factors[1:], need)
    assert list(native.may_cross(*args).items()) == list(_tick_py.may_cross(*args).items())
