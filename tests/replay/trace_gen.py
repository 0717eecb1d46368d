"""A generated trace with known hot intervals, and the intervals an exact detector reports."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

T0 = 1_764_470_000.0
THRESHOLD = 500.0
COOLDOWN = 1.0
HYSTERESIS = 0.8
WINDOW = 1.0
RULES = f"[default]\nthreshold = {THRESHOLD}\nttl = 2\ncooldown = {COOLDOWN}\n"


@dataclass(frozen=True)
class Burst:
    key: str
    rate: float
    start: float  # seconds after T0
    end: float

    def expected(self) -> tuple[float, float]:
        """(hot at, cooled at): the windowed rate crosses the threshold going up after
        ``window * threshold / rate``; it falls under ``threshold * hysteresis`` once less
        than that share of the window holds the burst, then the cool-down runs."""
        up = self.start + WINDOW * THRESHOLD / self.rate
        down = self.end + WINDOW * (1 - HYSTERESIS * THRESHOLD / self.rate) + COOLDOWN
        return T0 + up, T0 + down


BURSTS = [
    Burst("item:1", 2000.0, 3.0, 6.0),
    Burst("cart:7", 5000.0, 4.5, 5.5),
    Burst("item:1", 2000.0, 12.0, 14.0),
    Burst("user:x", 1000.0, 9.0, 16.0),
]
SPAN = 20.0


def events(step: float = 0.002, seed: int = 7) -> list[tuple[float, str, int]]:
    """(ts, key, count): bursts at their rates plus background far below the threshold."""
    rng = random.Random(seed)
    out: list[tuple[float, str, int]] = []
    n = round(SPAN / step)
    carry: dict[int, float] = {}
    for i in range(n):
        t = i * step
        for b_i, b in enumerate(BURSTS):
            if b.start <= t < b.end:
                carry[b_i] = carry.get(b_i, 0.0) + b.rate * step
                c = int(carry[b_i])
                if c:
                    carry[b_i] -= c
                    out.append((T0 + t, b.key, c))
        for _ in range(20):  # 10,000/s over 5,000 keys: ~2/s each
            out.append((T0 + t + rng.random() * step, f"bg:{rng.randrange(5000)}", 1))
    out.sort(key=lambda e: e[0])
    return out


def as_text(evs: list[tuple[float, str, int]], counted: bool) -> bytes:
    if counted:
        return "".join(f"{t:.6f} {k} {c}\n" for t, k, c in evs).encode()
    return "".join(f"{t:.6f} {k}\n" * c for t, k, c in evs).encode()


def as_json_lines(evs: list[tuple[float, str, int]]) -> bytes:
    return "".join(
        json.dumps({"time": round(t * 1000), "key": k, "count": c}) + "\n" for t, k, c in evs
    ).encode()
