"""Kafka source and reporter benchmark, against a throwaway Tansu broker on loopback.

1. Batched records: key accesses/s from a topic of ``lines`` records (``--keys-per-record``
   keys each, Zipf-distributed) through KafkaSource into the sketch (``update_lines``),
   and the same records consumed by a bare kafka-python KafkaConsumer in the same run;
   reported as a ratio (targets: >= 3M accesses/s per process, ratio >= 0.5).
2. One key per record (``format=key``): records/s through KafkaSource (target >= 100k/s),
   and kafka-python's raw rate for comparison.
3. Reporter: median cost of ``record()`` (target <= 1 us), and the messages and bytes per
   second it sends at ``--reporter-rate`` accesses/s over ``--reporter-keys`` distinct keys.

Rates are measured from the first record received to the last, so the group join (a few
seconds) is not counted. The broker and the client share the machine's cores.

    python benchmarks/bench_kafka.py            # full run
    python benchmarks/bench_kafka.py --quick    # a few seconds, for development
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

with warnings.catch_warnings():  # kafka-python 3.0 imports use deprecated importlib APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

from zipf import zipf_keys

from hotkeyd.client.reporter import Reporter
from hotkeyd.conn.kafka import KafkaSettings
from hotkeyd.metrics import Metrics
from hotkeyd.sources.kafka.source import KafkaSource
from hotkeyd.testing import KafkaBroker

try:
    from hotkeyd.sketch import new_sketch
except ImportError:  # the sketch stage is skipped without it
    new_sketch = None  # type: ignore[assignment]

PARTITIONS = 4


def create_topic(bootstrap: str, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        admin.close()


def produce(
    bootstrap: str, topic: str, values: list[bytes], keys: list[bytes] | None = None
) -> None:
    p = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, max_request_size=8 << 20
    )
    for i, v in enumerate(values):
        p.send(topic, value=v, key=None if keys is None else keys[i], partition=i % PARTITIONS)
    p.flush()
    p.close()


def raw_consume(bootstrap: str, topic: str, n_records: int) -> float:
    """Seconds for a bare KafkaConsumer to receive ``n_records``, from its first poll."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, max_poll_records=2000, fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    c.seek_to_beginning()
    got = 0
    deadline = time.monotonic() + 300
    t0 = time.perf_counter()
    while got < n_records and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got += len(recs)
    elapsed = time.perf_counter() - t0
    c.close()
    if got < n_records:
        raise RuntimeError(f"raw consumer got {got} of {n_records} records")
    return elapsed


def source_consume(bootstrap: str, topic: str, fmt: str, expected_events: int) -> float:
    """Seconds for KafkaSource to deliver ``expected_events`` accesses into the sketch.

    Timed from the moment the group assigns the partitions (fetching starts then), so
    the group join is left out, as the raw consumer's timing leaves out its bootstrap.
    """
    s = KafkaSettings(
        bootstrap=(bootstrap,), topics=(topic,), group=f"bench-{uuid.uuid4().hex[:8]}", format=fmt,
        start="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000,
    )  # fmt: skip
    src = KafkaSource(s, metrics=Metrics())
    sketch = new_sketch("heavykeeper", k=100) if new_sketch is not None else None
    events = 0
    src.start()
    deadline = time.monotonic() + 300
    try:
        while not src.assignment():
            if time.monotonic() > deadline:
                raise RuntimeError("no partitions assigned")
            time.sleep(0.005)
        t0 = time.perf_counter()
        while events < expected_events:
            if time.monotonic() > deadline:
                raise RuntimeError(f"source delivered {events} of {expected_events} accesses")
            for b in src.next_batch(0.1):
                if b.lines is not None:
                    if sketch is not None:
                        events += sketch.update_lines(b.lines, counted=b.counted)[0]
                    else:
                        events += b.lines.count(b"\n")
                elif b.keys is not None:
                    if sketch is not None:
                        sketch.update_many(b.keys, b.counts)
                    events += len(b.keys)
            src.commit()
        elapsed = time.perf_counter() - t0
    finally:
        src.close()
    if events != expected_events:
        raise RuntimeError(f"counted {events} accesses, expected {expected_events}")
    return elapsed


def bench_lines(bootstrap: str, n_records: int, keys_per_record: int) -> dict[str, Any]:
    topic = f"bench-lines-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    keys = zipf_keys(n_records * keys_per_record, universe=1_000_000, alpha=1.0, seed=1)
    values = [
        b"\n".join(keys[i : i + keys_per_record]) + b"\n"
        for i in range(0, len(keys), keys_per_record)
    ]
    produce(bootstrap, topic, values)
    total = n_records * keys_per_record
    raw = raw_consume(bootstrap, topic, n_records)
    src_s = source_consume(bootstrap, topic, "lines", total)
    return {
        "lines_records": n_records,
        "lines_keys_per_record": keys_per_record,
        "lines_raw_accesses_per_s": total / raw,
        "lines_source_accesses_per_s": total / src_s,
        "lines_ratio_to_raw": raw / src_s,
        "lines_sketch": new_sketch is not None,
    }


def bench_key(bootstrap: str, n_records: int) -> dict[str, Any]:
    topic = f"bench-key-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    keys = zipf_keys(n_records, universe=100_000, alpha=1.0, seed=2)
    produce(bootstrap, topic, [b""] * n_records, keys)
    raw = raw_consume(bootstrap, topic, n_records)
    src_s = source_consume(bootstrap, topic, "key", n_records)
    return {
        "key_records": n_records,
        "key_raw_records_per_s": n_records / raw,
        "key_source_records_per_s": n_records / src_s,
        "key_ratio_to_raw": raw / src_s,
    }


def bench_reporter(bootstrap: str, rate: float, distinct: int, seconds: float) -> dict[str, Any]:
    topic = f"bench-rep-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    keys = zipf_keys(200_000, universe=distinct, alpha=1.0, seed=3)
    rep = Reporter(bootstrap, topic, flush_interval=0.1)
    rec = rep.record
    # Median cost of record(): timed blocks of 1000 calls while the flush thread runs.
    samples = []
    for j in range(200):
        block = keys[(j * 1000) % len(keys) :][:1000]
        t0 = time.perf_counter_ns()
        for k in block:
            rec(k)
        samples.append((time.perf_counter_ns() - t0) / len(block))
    rep.flush(timeout=10)
    before = rep.stats()
    # Paced traffic: `rate` accesses/s in 10 ms slices.
    per_slice = max(1, int(rate / 100))
    t_start = time.monotonic()
    i = 0
    while time.monotonic() - t_start < seconds:
        for _ in range(per_slice):
            rec(keys[i % len(keys)])
            i += 1
        sleep = (i / rate) - (time.monotonic() - t_start)
        if sleep > 0:
            time.sleep(sleep)
    elapsed = time.monotonic() - t_start
    rep.close()
    after = rep.stats()
    return {
        "reporter_record_median_us": statistics.median(samples) / 1000,
        "reporter_rate_accesses_per_s": i / elapsed,
        "reporter_distinct_keys": distinct,
        "reporter_messages_per_s": (after["messages_sent"] - before["messages_sent"]) / elapsed,
        "reporter_bytes_per_s": (after["bytes_sent"] - before["bytes_sent"]) / elapsed,
        "reporter_dropped": after["dropped"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, for development")
    ap.add_argument("--lines-records", type=int, default=5000)
    ap.add_argument("--keys-per-record", type=int, default=1000)
    ap.add_argument("--key-records", type=int, default=300_000)
    ap.add_argument("--reporter-rate", type=float, default=200_000)
    ap.add_argument("--reporter-keys", type=int, default=10_000)
    ap.add_argument("--reporter-seconds", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.quick:
        args.lines_records, args.key_records, args.reporter_seconds = 1000, 30_000, 2.0
    res: dict[str, Any] = {}
    with KafkaBroker() as kb:
        res.update(bench_lines(kb.bootstrap, args.lines_records, args.keys_per_record))
        res.update(bench_key(kb.bootstrap, args.key_records))
        res.update(
            bench_reporter(
                kb.bootstrap, args.reporter_rate, args.reporter_keys, args.reporter_seconds
            )
        )
    if args.json:
        print(json.dumps(res))
        return 0
    print(
        f"lines: {args.lines_records} records x {args.keys_per_record} keys (sketch: {res['lines_sketch']})"
    )
    print(
        f"  kafka-python raw consume      {res['lines_raw_accesses_per_s'] / 1e6:>8.2f} M accesses/s"
    )
    print(
        f"  KafkaSource -> sketch         {res['lines_source_accesses_per_s'] / 1e6:>8.2f} M accesses/s"
    )
    print(
        f"  ratio to raw                  {res['lines_ratio_to_raw']:>8.2f}   (target >= 0.5; >= 3M/s)"
    )
    print(f"key: {args.key_records} records, one key each")
    print(f"  kafka-python raw consume      {res['key_raw_records_per_s'] / 1e3:>8.1f} k records/s")
    print(
        f"  KafkaSource -> sketch         {res['key_source_records_per_s'] / 1e3:>8.1f} k records/s (target >= 100k)"
    )
    print(
        f"reporter: {res['reporter_rate_accesses_per_s']:.0f} accesses/s over {args.reporter_keys} keys"
    )
    print(
        f"  record() median               {res['reporter_record_median_us']:>8.3f} us (target <= 1)"
    )
    print(f"  messages sent                 {res['reporter_messages_per_s']:>8.1f} /s")
    print(f"  bytes sent                    {res['reporter_bytes_per_s'] / 1e3:>8.1f} kB/s")
    print(f"  dropped                       {res['reporter_dropped']:>8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
