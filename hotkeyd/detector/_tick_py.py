"""Pure-Python twin of the C per-tick work (native/tick.c, native/_tickmodule.c).

:func:`evaluate` is one evaluation's candidate selection and threshold checks: from the
top-k of every closed sub-window of every lane and the hot keys to each candidate's rate
and the keys that may turn hot. The detector calls it once per evaluation, on whichever
of the two ``hotkeyd.native_or_twin`` picked; both give the same floats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["evaluate", "may_cross"]

Sums = Callable[[Any, Any, Any, Any], list[float]]
#: One lane: (window_sums, sketches, estimate caches, factors, top-k dicts, sketch k's).
LaneArrays = tuple[
    Sums, Sequence[Any], Sequence[dict], Sequence[float], Sequence[dict], Sequence[int]
]


def _low(top: dict, k: int) -> int:
    return min(top.values()) if top and len(top) >= k else 0


def _reach(
    tops: Sequence[dict], ks: Sequence[int], factors: Sequence[float], total: float
) -> list[int]:
    """How many leading entries of each top-k may reach ``total`` (see tick.h, tk_reach)."""
    lows = [_low(top, k) for top, k in zip(tops, ks, strict=True)]
    floor = 0.0
    for low, f in zip(lows, factors, strict=True):
        floor += low * f
    per = (total - floor) / len(tops)
    take = []
    for top, low, f in zip(tops, lows, factors, strict=True):
        j = 0
        for c in top.values():
            if (c - low) * f < per:
                break
            j += 1
        take.append(j)
    return take


def evaluate(
    lanes: Sequence[LaneArrays],
    hot: Sequence[bytes],
    need: float,
    prune: bool,
    min_rate: float,
    inv: float,
    cap: int,
    keep_all: bool,
) -> tuple[dict[bytes, float], list[bytes]]:
    """One evaluation's candidates, rates and contenders.

    Args:
        lanes: per lane, its closed sub-windows (those with events) as parallel arrays:
            the ``window_sums`` to call, the sketches, their estimate caches, scale
            factors, top-k dicts (count-descending) and the sketches' ``k``.
        hot: the keys hot now (always rated).
        need: with ``prune``, the scaled window count a key must be able to reach in one
            lane to be a candidate; without, every top-k key is one.
        min_rate: the lowest threshold of the rules (accesses/s).
        inv: ``1 / window``.
        cap: an estimate cache larger than this is dropped before the sums.
        keep_all: return every positive rate (for top rates), not only the hot keys' and
            the contenders'.

    Returns:
        ``(rates, contenders)``: the rate of each kept candidate, and the candidates not
        hot whose rate is positive and at least ``min_rate``, in candidate order.
    """
    for lane in lanes:
        if not isinstance(lane, tuple) or len(lane) != 6:
            raise TypeError("each lane must be a 6-tuple")
        if not len(lane[1]) == len(lane[2]) == len(lane[3]) == len(lane[4]) == len(lane[5]):
            raise ValueError(
                "a lane's caches, factors, tops or ks differ in length from its sketches"
            )
    cands: dict[bytes, None] = {}
    for _, _, caches, factors, tops, ks in lanes:
        for top, est in zip(tops, caches, strict=True):
            for key, count in top.items():
                est.setdefault(key, count)
        if not tops:
            continue
        if prune:
            for top, j in zip(tops, _reach(tops, ks, factors, need), strict=True):
                for i, key in enumerate(top):
                    if i >= j:
                        break
                    cands[key] = None
        else:
            for top in tops:
                cands.update(dict.fromkeys(top))
    hot_set = set(hot)
    cands.update(dict.fromkeys(hot))
    keys = list(cands)
    acc = [0.0] * len(keys)
    for sums, sketches, caches, factors, _, _ in lanes:
        if not sketches:
            continue
        for est in caches:
            if len(est) > cap:
                est.clear()
        for i, v in enumerate(sums(sketches, caches, factors, keys)):
            if v != 0.0:
                acc[i] += v
    rates: dict[bytes, float] = {}
    contenders: list[bytes] = []
    for key, a in zip(keys, acc, strict=True):
        r = a * inv
        is_hot = key in hot_set
        contender = not is_hot and r > 0.0 and r >= min_rate
        if is_hot or contender or (keep_all and a > 0.0):
            rates[key] = r
        if contender:
            contenders.append(key)
    return rates, contenders


def may_cross(
    top: dict,
    factor: float,
    tops: Sequence[dict],
    ks: Sequence[int],
    factors: Sequence[float],
    need: float,
) -> dict:
    """The entries of the open sub-window's top-k that may reach ``need`` (C: tk_floor).

    A key's bound is its count in ``top`` times ``factor`` plus, per closed sub-window,
    its count in that top-k or, when not listed, the top-k's floor (0 when not full),
    times that factor: no estimate is made, so the crossing check stays cheap.
    """
    if not len(tops) == len(ks) == len(factors):
        raise ValueError("tops, ks and factors differ in length")
    lows = [_low(t, k) for t, k in zip(tops, ks, strict=True)]
    out = {}
    for key, count in top.items():
        ub = count * factor
        for t, low, f in zip(tops, lows, factors, strict=True):
            if ub >= need:
                break
            c = t.get(key)
            ub += (c if c is not None else low) * f
        if ub >= need:
            out[key] = count
    return out
