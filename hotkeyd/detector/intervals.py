"""Hot intervals: the stretch of time a key was hot, from its hot and cool transitions.

What ``hotkeyd replay`` prints from the detector's transitions and ``hotkeyd history``
from the daemon's history stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hotkeyd.detector.config import Transition
from hotkeyd.protocol.wire import encode_key

__all__ = ["Interval", "from_transitions"]


@dataclass(frozen=True)
class Interval:
    """One stretch of time a key was hot (``end`` None: still hot when the input ended)."""

    key: bytes
    db: int
    rule: str
    start: float
    end: float | None
    peak: float
    instance: str = ""
    reason: str = ""

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = encode_key(self.key)
        out.update(
            db=self.db,
            rule=self.rule,
            start=round(self.start, 3),
            end=None if self.end is None else round(self.end, 3),
            duration=None if self.duration is None else round(self.duration, 3),
            peak=round(self.peak, 3),
        )
        if self.instance:
            out["instance"] = self.instance
        if self.reason:
            out["reason"] = self.reason
        return out


def from_transitions(
    transitions: Iterable[Transition], still_hot: Iterable[Transition] = ()
) -> list[Interval]:
    """Intervals closed by ``cool`` transitions, plus open ones for ``still_hot``.

    A ``cool`` transition carries its interval (``since`` .. ``at``, ``peak``), so
    ``hot`` transitions are only needed for keys still hot (pass them as ``still_hot``,
    e.g. :meth:`Detector.stop_transitions` with ``end`` left open).
    """
    out = [
        Interval(t.key, t.db, t.rule, t.since, t.at, t.peak, reason=t.reason)
        for t in transitions
        if t.kind == "cool"
    ]
    out += [Interval(t.key, t.db, t.rule, t.since, None, t.peak) for t in still_hot]
    out.sort(key=lambda i: (i.start, i.db, i.key))
    return out
