"""Run every benchmark with its README settings and collect the tables.

    python benchmarks/run_all.py            # full run (~25 min on 2 cores)
    python benchmarks/run_all.py --quick    # small sizes, a smoke test of the scripts

Output goes to stdout and to benchmarks/RESULTS.md (markdown, one section per script,
with the exact command that produced it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = [
    ["bench_sketch.py"],
    ["bench_daemon.py"],
    ["bench_kafka.py", "--lines-records", "3000", "--key-records", "100000"],
    ["bench_kafka_backlog.py"],
    ["bench_replay.py", "--events", "5000000", "--span", "5"],
    ["bench_monitor.py", "--repeats", "5"],
    ["bench_client.py"],
    ["bench_idempotency.py"],
    ["bench_cluster_pubsub.py"],
    ["bench_fleet.py", "--capacity", "--repeats", "3"],
    ["bench_fleet.py", "--apps", "1000", "2500"],
]
QUICK = [
    [
        "bench_sketch.py",
        "--events",
        "300000",
        "--repeats",
        "1",
        "--alpha",
        "1.0",
        "--memory",
        "65536",
    ],
    [
        "bench_daemon.py",
        "--bursts",
        "10",
        "--events",
        "1000000",
        "--repeats",
        "1",
        "--seconds",
        "5",
    ],
    ["bench_kafka.py", "--quick"],
    ["bench_kafka_backlog.py", "--quick"],
    ["bench_replay.py", "--quick"],
    ["bench_monitor.py", "--quick"],
    ["bench_client.py", "--quick"],
    ["bench_idempotency.py", "--quick"],
    ["bench_cluster_pubsub.py", "--messages", "2000", "--repeats", "1"],
    ["bench_fleet.py", "--capacity"],
]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args()
    parts = [f"# Benchmark results ({time.strftime('%Y-%m-%d')})\n"]
    failed = 0
    for cmd in QUICK if args.quick else FULL:
        shown = "python benchmarks/" + " ".join(cmd)
        print(f"\n$ {shown}", flush=True)
        proc = subprocess.run(
            [sys.executable, str(HERE / cmd[0]), *cmd[1:]], capture_output=True, text=True
        )
        print(proc.stdout, end="", flush=True)
        if proc.returncode != 0:
            failed += 1
            print(proc.stderr, file=sys.stderr)
        parts.append(f"\n## `{shown}`\n\n{proc.stdout}")
    if not args.quick:
        Path(args.out).write_text("".join(parts))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
