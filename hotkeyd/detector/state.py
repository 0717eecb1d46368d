"""The hot/cool state machine, with hysteresis, cool-down, a cap and re-announcement.

A key is *cold* (no state kept at all, so memory is bounded by ``max_hot``) or *hot*.

- cold -> hot: its rate reaches the threshold of its rule (and the rule is not
  ``ignore``), and there is room under the cap, or it beats the lowest hot key
  (below).
- hot -> cold: its rate has stayed below ``threshold * hysteresis`` for the rule's
  ``cooldown`` seconds (measured from the first tick that saw it below). A rate back
  at or above ``threshold * hysteresis`` resets the clock, so a key hovering around
  the threshold never flaps. Also when a rules change makes it ``ignore``.
- At the cap, a newcomer evicts the hot key with the lowest rate only if its rate
  exceeds that key's by the factor ``1 / hysteresis``; without that margin two keys
  with nearly equal rates would swap places every tick.
- A hot key is re-announced (``still_hot``) once ``ttl / 2`` has passed since it was
  last announced, so clients that missed a message converge before their cached
  entry expires; and at once when a rules change altered its rule name or TTL.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hotkeyd.detector.rules import Rule

__all__ = ["HotCoolStates", "HotKey", "Transitions"]


@dataclass(slots=True)
class HotKey:
    """State of one hot key (``ident`` is the internal (db, key) encoding)."""

    ident: bytes
    rule: Rule
    rate: float
    since_wall: float
    since_mono: float
    announced: float
    below_since: float | None = None
    kind: str | None = None
    peak: float = 0.0  # highest rate since it turned hot


@dataclass(slots=True)
class Transitions:
    """Result of one evaluation."""

    new: list[HotKey]
    still: list[HotKey]
    cooled: list[tuple[HotKey, str]]  # (state, reason: "cool" | "evict" | "ignore")


class HotCoolStates:
    """The detector's hot/cool state machine: which keys are hot now, and when they cool.

    (Not the client's :class:`hotkeyd.client.hotset.HotSet`, which is what an app
    believes is hot from the notifications.)

    Args:
        max_hot: cap on keys hot at once.
        hysteresis: cooling threshold factor and eviction margin (0 < h <= 1).
    """

    def __init__(self, max_hot: int, hysteresis: float) -> None:
        self.max_hot = max_hot
        self.hysteresis = hysteresis
        self._hot: dict[bytes, HotKey] = {}

    def __len__(self) -> int:
        return len(self._hot)

    def __contains__(self, ident: object) -> bool:
        return ident in self._hot

    def __iter__(self) -> Iterator[HotKey]:
        return iter(self._hot.values())

    def hot_indices(self, idents: Sequence[bytes]) -> list[int]:
        """Positions of the hot ones among ``idents`` (one pass, for the demand intake)."""
        hot = self._hot
        return [i for i, ident in enumerate(idents) if ident in hot]

    def get(self, ident: bytes) -> HotKey | None:
        return self._hot.get(ident)

    def idents(self) -> list[bytes]:
        return list(self._hot)

    def evaluate(
        self,
        rates: dict[bytes, float],
        rule_of: Callable[[bytes], Rule],
        now: float,
        now_wall: float,
        min_threshold: float = 0.0,
        contenders: list[bytes] | None = None,
    ) -> Transitions:
        """Apply one tick's rates.

        Args:
            rates: rate (accesses/s) per candidate; hot keys missing count as 0.
            rule_of: the rule for an ident (the current rule set's cached lookup).
            now: monotonic time of the tick (cool-downs, re-announcement).
            now_wall: wall time of the tick (``since`` of new keys).
            min_threshold: no rule has a lower threshold; keys below it are skipped
                without a rule lookup.
            contenders: the keys of ``rates`` not hot whose rate is positive and at least
                ``min_threshold``, when the caller picked them already (the detector's
                per-tick work does, in C); None: picked here from ``rates``.
        """
        h = self.hysteresis
        still: list[HotKey] = []
        cooled: list[tuple[HotKey, str]] = []
        for ident, hk in list(self._hot.items()):
            rule = rule_of(ident)
            hk.rate = rates.get(ident, 0.0)
            if hk.rate > hk.peak:
                hk.peak = hk.rate
            if rule.ignore:
                cooled.append((self._hot.pop(ident), "ignore"))
                continue
            changed = rule.name != hk.rule.name or rule.ttl_ms != hk.rule.ttl_ms
            hk.rule = rule
            if hk.rate >= rule.threshold * h:
                hk.below_since = None
            elif hk.below_since is None:
                hk.below_since = now
            if hk.below_since is not None and now - hk.below_since >= rule.cooldown:
                cooled.append((self._hot.pop(ident), "cool"))
                continue
            if changed or now - hk.announced >= rule.ttl / 2:
                hk.announced = now
                still.append(hk)

        if contenders is None:
            contenders = [
                ident
                for ident, rate in rates.items()
                if rate >= min_threshold and rate > 0.0 and ident not in self._hot
            ]
        ranked = self._ranked(rates, contenders, rule_of)
        new: list[HotKey] = []
        lowest: list[tuple[float, bytes]] | None = None
        for rate, ident, rule in ranked:
            if len(self._hot) >= self.max_hot:
                if lowest is None:
                    lowest = [(k.rate, k.ident) for k in self._hot.values()]
                    heapq.heapify(lowest)
                low_rate, low_ident = lowest[0]
                if rate * h <= low_rate:
                    break  # contenders are sorted: nobody after this one wins either
                heapq.heappop(lowest)
                victim = self._hot.pop(low_ident)
                cooled.append((victim, "evict"))
            hk = HotKey(
                ident, rule, rate, since_wall=now_wall, since_mono=now, announced=now, peak=rate
            )
            self._hot[ident] = hk
            new.append(hk)
            if lowest is not None:
                heapq.heappush(lowest, (rate, ident))
        if cooled and still:
            still = [hk for hk in still if hk.ident in self._hot]
        return Transitions(new, still, cooled)

    def _ranked(
        self, rates: dict[bytes, float], contenders: list[bytes], rule_of: Callable[[bytes], Rule]
    ) -> list[tuple[float, bytes, Rule]]:
        """The contenders at or above their rule's threshold, highest rate first."""
        ranked: list[tuple[float, bytes, Rule]] = []
        for ident in contenders:
            rate = rates[ident]
            rule = rule_of(ident)
            if not rule.ignore and rate >= rule.threshold:
                ranked.append((rate, ident, rule))
        ranked.sort(key=lambda c: (-c[0], c[1]))
        return ranked

    def admit(
        self,
        rates: dict[bytes, float],
        contenders: list[bytes],
        rule_of: Callable[[bytes], Rule],
        now: float,
        now_wall: float,
    ) -> list[HotKey]:
        """cold -> hot only, between evaluations (a key that crossed its threshold).

        Nothing cools here and nobody is evicted: at the cap a newcomer waits for the next
        evaluation, where the eviction margin applies as always.
        """
        new: list[HotKey] = []
        for rate, ident, rule in self._ranked(rates, contenders, rule_of):
            if len(self._hot) >= self.max_hot:
                break
            if ident in self._hot:
                continue
            hk = HotKey(
                ident, rule, rate, since_wall=now_wall, since_mono=now, announced=now, peak=rate
            )
            self._hot[ident] = hk
            new.append(hk)
        return new
