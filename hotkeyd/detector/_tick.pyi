"""Type stubs for the C per-tick work (native/_tickmodule.c); the twin is _tick_py."""

from collections.abc import Sequence
from typing import Any

def evaluate(
    lanes: Sequence[
        tuple[Any, Sequence[Any], Sequence[dict], Sequence[float], Sequence[dict], Sequence[int]]
    ],
    hot: Sequence[bytes],
    need: float,
    prune: bool,
    min_rate: float,
    inv: float,
    cap: int,
    keep_all: bool,
) -> tuple[dict[bytes, float], list[bytes]]: ...
def may_cross(
    top: dict,
    factor: float,
    tops: Sequence[dict],
    ks: Sequence[int],
    factors: Sequence[float],
    need: float,
) -> dict: ...
