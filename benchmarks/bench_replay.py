"""Replay throughput: events/s of ``hotkeyd replay``'s engine over a timestamped file.

Writes a trace of ``--events`` lines (``ts key``, Zipf background over ``--keys`` keys and
one key hot for a third of the span) into a temporary file, then replays it ``--repeats``
times on one core with the default detector (window 1 s, tick 100 ms) and reports the
median events/s, split into parsing (the C ``split_ticks`` fast path) and the whole replay
(parse + sketch + one evaluation per tick).

Two shapes (``--shape``):

- ``dense``: 10 M events over 10 s of event time (1 M events per second, microsecond
  timestamps, in order). Target: >= 6 M events/s.
- ``realistic``: what production logs look like: 1 M lines at ~10k events/s (100 s of event
  time, so 1,000 evaluations), millisecond timestamps (``ts`` in ms), slightly out of
  order (each line up to 20 ms older than the newest), a few keys near the threshold
  (0.9x, 1.0x, 1.1x) and one at 2x for a third of the span. Target: >= 2 M events/s.

    python benchmarks/bench_replay.py                       # both shapes
    python benchmarks/bench_replay.py --shape realistic     # one of them
    python benchmarks/bench_replay.py --quick               # dense 1M events, fewer repeats
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from zipf import zipf_keys

from hotkeyd.detector import DetectorConfig
from hotkeyd.detector.rules import parse_rules
from hotkeyd.replay import replay
from hotkeyd.replay.trace import IMPLEMENTATION, TraceStats, read_trace, split_ticks

T0 = 1_764_470_000.0


def pad(keys: list[bytes], key_len: int | None) -> list[bytes]:
    """Keys padded (or cut) to ``key_len`` bytes, each still distinct (None: as they are)."""
    if key_len is None:
        return keys
    return [(k + b":" + b"x" * key_len)[:key_len] if len(k) < key_len else k for k in keys]


def write_trace(
    path: str,
    events: int,
    span: float,
    universe: int,
    alpha: float = 1.0,
    key_len: int | None = None,
) -> None:
    keys = pad(zipf_keys(min(events, 1_000_000), universe, alpha=alpha, seed=1), key_len)
    step = span / events
    with open(path, "wb") as f:
        chunk: list[bytes] = []
        for i in range(events):
            t = i * step
            k = b"hot:1" if span / 3 <= t < 2 * span / 3 and i % 5 == 0 else keys[i % len(keys)]
            chunk.append(b"%.6f %s\n" % (T0 + t, k))
            if len(chunk) >= 100_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))


REALISTIC_RATE = 10_000.0  # events/s of the realistic shape
REALISTIC_THRESHOLD = 1000.0  # accesses/s; the near keys sit around it


def write_realistic(
    path: str, events: int, universe: int, alpha: float = 1.0, key_len: int | None = None
) -> None:
    """ms timestamps, ~10k events/s, jitter up to 20 ms back, keys near the threshold."""
    rng = np.random.default_rng(7)
    keys = pad(zipf_keys(min(events, 1_000_000), universe, alpha=alpha, seed=2), key_len)
    span = events / REALISTIC_RATE
    t0_ms = int(T0 * 1000)
    ms = np.floor(np.arange(events) / REALISTIC_RATE * 1000 - rng.uniform(0, 20, events))
    ms = np.maximum(ms, 0).astype(np.int64) + t0_ms
    # Near-threshold keys at 0.9x, 1.0x and 1.1x all along, one at 2x for the middle third
    # (the background's top Zipf key is at ~0.8x).
    near = [(b"near:090", 0.9), (b"near:100", 1.0), (b"near:110", 1.1)]
    pick = rng.random(events)
    with open(path, "wb") as f:
        chunk: list[bytes] = []
        for i in range(events):
            p = pick[i] * REALISTIC_RATE / REALISTIC_THRESHOLD
            key = keys[i % len(keys)]
            acc = 0.0
            for name, share in near:
                acc += share
                if p < acc:
                    key = name
                    break
            else:
                if p < acc + 2.0 and span / 3 <= i / REALISTIC_RATE < 2 * span / 3:
                    key = b"hot:2x"
            chunk.append(b"%d %s\n" % (ms[i], key))
            if len(chunk) >= 100_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))


def run_shape(
    shape: str,
    events: int,
    span: float,
    universe: int,
    repeats: int,
    alpha: float = 1.0,
    key_len: int | None = None,
) -> dict:
    # dense: hot:1 is 20%, the top Zipf key ~8%
    threshold = 0.15 * events / span if shape == "dense" else REALISTIC_THRESHOLD
    rules = parse_rules(f"[default]\nthreshold = {threshold:g}\nttl = 2\ncooldown = 1\n")
    fd, path = tempfile.mkstemp(suffix=".trace")
    os.close(fd)
    try:
        if shape == "dense":
            write_trace(path, events, span, universe, alpha, key_len)
        else:
            write_realistic(path, events, universe, alpha, key_len)
        size = os.path.getsize(path)
        parse, whole, cpu = [], [], []
        found = None
        for _ in range(repeats):
            with open(path, "rb") as f:
                data = f.read()
            t = time.perf_counter()
            split_ticks(data, 0.1)
            parse.append(events / (time.perf_counter() - t))
            del data
            c = time.process_time()
            with open(path, "rb") as f:
                res = replay(read_trace(f, 0.1, TraceStats()), DetectorConfig(), rules)
            c = time.process_time() - c
            assert res.events + res.late == events, (res.events, res.late)
            whole.append(res.events / res.seconds)
            cpu.append(res.events / c if c > 0 else 0.0)
            found = [
                (
                    iv.key.decode(),
                    round(iv.start - T0, 1),
                    None if iv.end is None else round(iv.end - T0, 1),
                )
                for iv in res.intervals
            ]
    finally:
        os.unlink(path)
    return {
        "shape": shape,
        "alpha": alpha,
        "key_len": key_len,
        "implementation": IMPLEMENTATION,
        "events": events,
        "late": res.late,
        "file_mb": round(size / 1e6, 1),
        "parse_events_per_s": round(statistics.median(parse)),
        "replay_events_per_s": round(statistics.median(whole)),
        "replay_events_per_cpu_s": round(statistics.median(cpu)),
        "target_events_per_s": 6_000_000 if shape == "dense" else 2_000_000,
        "intervals": found,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--span", type=float, default=10.0, help="seconds of event time")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--realistic-events", type=int, default=1_000_000)
    ap.add_argument("--shape", choices=["dense", "realistic", "both"], default="both")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--alpha", type=float, default=1.0, help="Zipf skew of the background")
    ap.add_argument("--key-len", type=int, help="pad background keys to this many bytes")
    args = ap.parse_args()
    if args.quick:
        args.events, args.repeats = 1_000_000, 2
    shapes = ["dense", "realistic"] if args.shape == "both" else [args.shape]
    outs = []
    for shape in shapes:
        if shape == "dense":
            out = run_shape(
                shape, args.events, args.span, args.keys, args.repeats, args.alpha, args.key_len
            )
        else:
            out = run_shape(
                shape, args.realistic_events, 0.0, args.keys, args.repeats, args.alpha, args.key_len
            )
        outs.append(out)
        if args.json:
            print(json.dumps(out))
            continue
        print(f"{shape}: {out['events']:,} events, {out['file_mb']} MB ({IMPLEMENTATION})")
        print(f"  parse  (split_ticks):   {out['parse_events_per_s'] / 1e6:6.2f} M events/s")
        print(
            f"  replay (parse+detect):  {out['replay_events_per_s'] / 1e6:6.2f} M events/s, "
            f"{out['replay_events_per_cpu_s'] / 1e6:.2f} M per CPU s "
            f"(target {out['target_events_per_s'] / 1e6:g})"
        )
        print(f"  intervals: {out['intervals']}")


if __name__ == "__main__":
    main()
