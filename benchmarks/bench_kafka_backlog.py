"""Kafka backlog ingest: ``hotkeyd run`` with start=earliest vs bare kafka-python, one run.

Against a real Apache Kafka broker (KRaft; jars from ``make kafka-jars``): a topic of
``--records`` records of ``--keys-per-record`` newline-separated keys (4 partitions, 40 s
of event time) is read

1. by a bare kafka-python ``KafkaConsumer`` (no group, every partition assigned), counting
   records and keys -- the floor any Python consumer pays;
2. by the daemon, ``hotkeyd run -s 'kafka://...?format=lines&start=earliest'``, until its
   ``hotkeyd_source_events_total`` reaches every key (watched on /metrics).

The bare consumer is timed from its first poll to its last key; the daemon from the first
keys it rated to the last (its start and group join are not counted; sampled on /metrics
every 10 ms, which favours neither side by more than that). The ratio (daemon keys/s /
bare keys/s) uses the medians over ``--repeats`` alternating runs. Target: ratio >= 0.5.

    python benchmarks/bench_kafka_backlog.py            # 2M keys
    python benchmarks/bench_kafka_backlog.py --quick    # 200k keys
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kafka_apache"))  # the broker fixture of the suite

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

from apache_broker import ApacheKafka, jars_present  # noqa: E402

from hotkeyd.testing import free_port  # noqa: E402

PARTITIONS = 4


def produce(bootstrap: str, topic: str, records: int, per: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    rng = random.Random(1)
    now = time.time()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
    span = 40.0
    for i in range(records):
        keys = [b"hot:bulk"] * (per // 20) + [
            b"u:%d" % rng.randrange(200_000) for _ in range(per - per // 20)
        ]
        p.send(
            topic,
            value=b"\n".join(keys) + b"\n",
            timestamp_ms=int((now - span + i * span / records) * 1000),
        )
    p.flush()
    p.close()


def bare(bootstrap: str, topic: str, records: int) -> float:
    """Keys/s a bare KafkaConsumer reads (and counts), from its first poll to its last key."""
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, max_poll_records=2000
    )
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    t = time.perf_counter()
    got = keys = 0
    while got < records:
        for recs in c.poll(timeout_ms=200).values():
            got += len(recs)
            keys += sum(r.value.count(b"\n") for r in recs)
    took = time.perf_counter() - t
    c.close()
    return keys / took


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def daemon(bootstrap: str, topic: str, total: int) -> float:
    """Keys/s ``hotkeyd run`` (start=earliest, fresh group) rates, from its first to its last."""
    port = free_port()
    url = f"kafka://{bootstrap}/{topic}?group=g-{uuid.uuid4().hex[:8]}&format=lines&start=earliest"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "run",
            "-s",
            url,
            "--http-port",
            str(port),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        t = None
        first = 0.0
        end = time.monotonic() + 300
        while time.monotonic() < end:
            try:
                n = metric(port, "hotkeyd_source_events_total{")
            except OSError:
                time.sleep(0.01)
                continue
            if t is None and n > 0:
                t, first = time.perf_counter(), n  # like the bare consumer: from the first keys
            if n >= total and t is not None:
                return (total - first) / (time.perf_counter() - t)
            time.sleep(0.01)
        raise RuntimeError("the daemon did not ingest the backlog in 300 s")
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--keys-per-record", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 200, 2
    if not jars_present():
        sys.exit("Apache Kafka jars missing: run `make kafka-jars`")
    total = args.records * args.keys_per_record
    with ApacheKafka() as kb:
        topic = f"backlog-{uuid.uuid4().hex[:8]}"
        produce(kb.bootstrap, topic, args.records, args.keys_per_record)
        bare_r, daemon_r = [], []
        for _ in range(args.repeats):
            bare_r.append(bare(kb.bootstrap, topic, args.records))
            daemon_r.append(daemon(kb.bootstrap, topic, total))
    b, d = statistics.median(bare_r), statistics.median(daemon_r)
    out = {
        "keys": total,
        "bare_keys_per_s": round(b),
        "daemon_keys_per_s": round(d),
        "ratio": round(d / b, 3),
        "target_ratio": 0.5,
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"backlog: {total:,} keys in {args.records:,} records ({PARTITIONS} partitions)")
        print(f"bare kafka-python: {out['bare_keys_per_s'] / 1e6:6.2f} M keys/s")
        print(f"hotkeyd run:       {out['daemon_keys_per_s'] / 1e6:6.2f} M keys/s")
        print(f"ratio:             {out['ratio']:.2f}   (target >= 0.5)")


if __name__ == "__main__":
    main()
