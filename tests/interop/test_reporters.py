"""Every language's Kafka reporter puts a key on the same partition, with exact totals.

A real broker (Tansu) and a 4-partition topic per language; the Python, Go and Node
reporters each send the same key counts, and the daemon's own record decoder
(``format=reporter``) reads them back: every key must sit on partition
``murmur3_32(key, 0) mod 4`` (``hotkeyd.client.reporter.partition_for``) with its exact
total, whichever language sent it. So a Go service and a Python service reporting the
same key reach the same daemon of a consumer group.
"""

from __future__ import annotations

import collections
import json
import subprocess
from pathlib import Path

import pytest

from hotkeyd.client.reporter import Reporter, partition_for
from hotkeyd.conn.kafka import kafka_python
from hotkeyd.protocol.formats import RecordDecoder
from hotkeyd.testing import KafkaBroker

from .apps import ROOT, _need, _run

kafka = kafka_python()  # imported quietly (kafka-python warns at import time)

from tests.kafka.kafka_testutil import count_batches, create_topic  # noqa: E402

pytestmark = pytest.mark.integration

# Keys that exercise both reporter encodings: counted lines, and the JSON batch for keys
# that cannot be a line (a leading '{', a TAB) or are not UTF-8 text.
COUNTS: dict[bytes, int] = {f"item:{i}".encode(): 1 + (i * 37) % 500 for i in range(300)}
COUNTS.update({b"{json}:1": 7, b"tab\there": 3, "caf\u00e9:\u2603".encode(): 11})


def _send_python(bootstrap: str, topic: str) -> None:
    r = Reporter(bootstrap, topic)
    for k, n in COUNTS.items():
        r.record(k, n)
    r.close()


def _send_cli(cmd: list[str], bootstrap: str, topic: str) -> None:
    lines = "".join(f"{k.decode()} {n}\n" for k, n in COUNTS.items())
    proc = subprocess.run([*cmd, "--brokers", bootstrap, "--topic", topic], input=lines,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    dropped = stats.get("dropped", stats.get("Dropped"))
    assert dropped == 0, stats


def _command(lang: str, tmp: Path) -> list[str]:
    if lang == "go":
        exe = tmp / "report-go"
        _run([_need("go"), "build", "-o", str(exe), "./examples/report"], ROOT / "clients" / "go")
        return [str(exe)]
    node_dir = ROOT / "clients" / "node"
    if not (node_dir / "node_modules").is_dir():
        _run([_need("npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error"], node_dir)
    _run([_need("npm"), "run", "build", "--silent"], node_dir)
    return [_need("node"), str(node_dir / "dist" / "examples" / "report.js")]


@pytest.mark.parametrize("lang", ["python", "go", "node"])
def test_reporter_partitions_and_totals(
    lang: str, kafka_broker: KafkaBroker, unique: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = f"rep-{lang}-{unique}"
    create_topic(bootstrap, topic, partitions=4)
    if lang == "python":
        _send_python(bootstrap, topic)
    else:
        _send_cli(_command(lang, tmp_path), bootstrap, topic)

    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)  # fmt: skip
    per_partition: dict[int, collections.Counter[bytes]] = collections.defaultdict(
        collections.Counter
    )
    decoder = RecordDecoder("reporter")
    try:
        for rec in consumer:
            batches, bad = decoder.decode([rec])
            assert bad == [], bad
            count_batches(batches, per_partition[rec.partition])
    finally:
        consumer.close()
    total: collections.Counter[bytes] = collections.Counter()
    for p, counts in per_partition.items():
        for k in counts:
            assert partition_for(k, 4) == p, f"{lang}: {k!r} on partition {p}"
        total.update(counts)
    assert dict(total) == COUNTS
