"""Replay throughput: events/s of ``hotkeyd replay``'s engine over a timestamped file.

Writes a trace of ``--events`` lines (``ts key``, Zipf background over ``--keys`` keys and
one key hot for a third of the span) into a temporary file, then replays it ``--repeats``
times on one core with the default detector (window 1 s, tick 100 ms) and reports the
median events/s, split into parsing (the C ``split_ticks`` fast path) and the whole replay
(parse + sketch + one evaluation per tick). Target: >= 5 M events/s.

    python benchmarks/bench_replay.py               # 10M events over 20 s of event time
    python benchmarks/bench_replay.py --quick       # 1M events
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

from zipf import zipf_keys

from hotkeyd.detector import DetectorConfig
from hotkeyd.detector.rules import parse_rules
from hotkeyd.replay import replay
from hotkeyd.replay.trace import IMPLEMENTATION, TraceStats, read_trace, split_ticks

T0 = 1_764_470_000.0


def write_trace(path: str, events: int, span: float, universe: int) -> None:
    keys = zipf_keys(min(events, 1_000_000), universe, alpha=1.0, seed=1)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--span", type=float, default=10.0, help="seconds of event time")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.events, args.repeats = 1_000_000, 2
    threshold = 0.15 * args.events / args.span  # hot:1 is 20%, the top Zipf key ~8%
    rules = parse_rules(f"[default]\nthreshold = {threshold:g}\nttl = 2\ncooldown = 1\n")
    fd, path = tempfile.mkstemp(suffix=".trace")
    os.close(fd)
    try:
        write_trace(path, args.events, args.span, args.keys)
        size = os.path.getsize(path)
        parse, whole = [], []
        found = None
        for _ in range(args.repeats):
            with open(path, "rb") as f:
                data = f.read()
            t = time.perf_counter()
            split_ticks(data, 0.1)
            parse.append(args.events / (time.perf_counter() - t))
            del data
            with open(path, "rb") as f:
                res = replay(read_trace(f, 0.1, TraceStats()), DetectorConfig(), rules)
            assert res.events == args.events, res.events
            whole.append(res.events / res.seconds)
            found = [
                (iv.key.decode(), round(iv.start - T0, 1), round((iv.end or 0) - T0, 1))
                for iv in res.intervals
            ]
    finally:
        os.unlink(path)
    out = {
        "implementation": IMPLEMENTATION,
        "events": args.events,
        "file_mb": round(size / 1e6, 1),
        "parse_events_per_s": round(statistics.median(parse)),
        "replay_events_per_s": round(statistics.median(whole)),
        "target_events_per_s": 5_000_000,
        "intervals": found,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"trace: {args.events:,} events, {out['file_mb']} MB ({IMPLEMENTATION})")
        print(f"parse  (split_ticks):   {out['parse_events_per_s'] / 1e6:6.2f} M events/s")
        print(
            f"replay (parse+detect):  {out['replay_events_per_s'] / 1e6:6.2f} M events/s   (target 5)"
        )
        print(f"intervals: {found}")


if __name__ == "__main__":
    main()
