"""examples/kafka_consumer: consumer de-duplication against a real (Tansu) broker."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_testutil import create_topic, producer

from hotkeyd.testing import KafkaBroker

pytestmark = pytest.mark.integration

CONSUMER = Path(__file__).resolve().parents[2] / "examples" / "kafka_consumer" / "consumer.py"


def test_a_consumer_killed_before_its_offset_commit_applies_each_payment_once(
    kafka_broker: KafkaBroker, tmp_path: Path, unique: str
) -> None:
    topic, group, db = f"payments-{unique}", f"billing-{unique}", str(tmp_path / "app.db")
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    payments = [{"id": f"p{i}", "account": "alice", "cents": 100 * (i + 1)} for i in range(5)]
    p = producer(kafka_broker.bootstrap)
    for pay in [*payments, payments[1]]:  # p1 twice: the producer's own retry
        p.send(topic, json.dumps(pay).encode())
    p.flush()
    p.close()
    args = [sys.executable, str(CONSUMER), kafka_broker.bootstrap, topic, group, db]
    died = subprocess.run([*args, "--crash-after-commit", "3"], timeout=60)
    assert died.returncode == 3
    done = subprocess.run(args, timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["skipped"] >= 2, report  # the redelivered p2, and p1 sent twice
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT cents FROM balances").fetchone() == (1500,)
    applied = conn.execute("SELECT payment, COUNT(*) FROM applied GROUP BY payment").fetchall()
    assert sorted(applied) == [(f"p{i}", 1) for i in range(5)]
    conn.close()
