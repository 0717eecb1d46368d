"""A replay batches by sub-window, and that changes nothing it finds.

An out-of-order trace with millisecond timestamps alternates between two ticks at each
boundary. The replay joins the segments that step back in time (trace reader and
replay loop); this checks that the transitions equal those of feeding every segment to a
detector one by one, in file order, and that the sketch got a few batches per tick.
"""

from __future__ import annotations

import io
import random
from dataclasses import replace

from hotkeyd.batch import Batch
from hotkeyd.detector import DetectorConfig
from hotkeyd.detector.detector import Detector
from hotkeyd.detector.rules import parse_rules
from hotkeyd.replay import replay
from hotkeyd.replay.run import ReplayClock
from hotkeyd.replay.trace import TraceStats, read_trace, split_ticks

T0_MS = 1_764_470_000_000
RULES = parse_rules("[default]\nthreshold = 40\nttl = 2\ncooldown = 0.5\n")


def _trace(seconds: int = 8, rate: int = 1000) -> bytes:
    rng = random.Random(5)
    out = []
    for i in range(seconds * rate):
        ms = T0_MS + i * 1000 // rate - rng.randrange(20)
        t = i / rate
        r = rng.random()
        if r < 0.06 or (3 <= t < 6 and r < 0.12):
            key = b"hot:a" if r < 0.06 else b"hot:b"
        else:
            key = b"k%d" % rng.randrange(3000)
        out.append(b"%d %s\n" % (ms, key))
    return b"".join(out)


def _one_by_one(data: bytes, cfg: DetectorConfig) -> list[tuple[str, bytes, float, str]]:
    """Every split_ticks segment fed on its own, in file order (the unbatched replay)."""
    clock = ReplayClock()
    det = Detector(replace(cfg, max_lag=7 * 86400.0), RULES, clock)
    segments, _, _ = split_ticks(data, cfg.tick)
    assert len(segments) > 3 * 8 * 10  # the trace does alternate at tick boundaries
    transitions = []
    for index, lines in segments:
        ts = (index + 0.5) * cfg.tick
        clock.now = max(clock.now, ts)
        det.ingest(Batch(lines=lines, counted=True, ts=ts, source="replay"), lane="replay")
        transitions += det.tick().transitions
    end = clock.now + cfg.tick
    clock.now = end
    det.advance("replay", end)
    transitions += det.tick().transitions
    return [(t.kind, t.key, round(t.at, 6), t.reason) for t in transitions]


def test_batched_replay_finds_the_same_transitions() -> None:
    data = _trace()
    cfg = DetectorConfig()
    res = replay(read_trace(io.BytesIO(data), cfg.tick, TraceStats()), cfg, RULES)
    got = [(t.kind, t.key, round(t.at, 6), t.reason) for t in res.transitions]
    want = _one_by_one(data, cfg)
    assert {t[1] for t in want if t[0] == "hot"} >= {b"hot:a", b"hot:b"}
    assert got == want
    assert res.events == data.count(b"\n")


def test_replay_feeds_one_batch_per_step() -> None:
    data = _trace()
    cfg = DetectorConfig()
    batches = list(read_trace(io.BytesIO(data), cfg.tick, TraceStats()))
    segments, _, _ = split_ticks(data, cfg.tick)
    ticks = len({index for index, _ in segments})
    # per tick: the segment that steps into it, the rest of it, the stragglers of the one before
    assert len(batches) <= 3 * ticks < len(segments) / 2
