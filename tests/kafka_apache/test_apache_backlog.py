"""A 2M-access backlog with start=earliest, and replaying a Kafka time range (real Apache Kafka)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apache_broker import ApacheKafka, create_topic
from kafka import KafkaProducer
from replay.test_replay import check_intervals
from replay.trace_gen import RULES as REPLAY_RULES
from replay.trace_gen import T0, events
from service.daemon import Daemon, Listener

from hotkeyd.testing import RedisServer

pytestmark = pytest.mark.integration

KEYS_PER_RECORD = 1000
RECORDS = 2000  # 2,000,000 accesses


def produce_backlog(bootstrap: str, topic: str, now: float) -> None:
    """40 s of traffic in time order: hot:bulk is 5% (2,500/s); 200,000 other keys share the rest."""
    rng = random.Random(5)
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
    for i in range(RECORDS):
        keys = [b"hot:bulk"] * 50 + [b"u:%d" % rng.randrange(200_000) for _ in range(950)]
        p.send(
            topic, value=b"\n".join(keys) + b"\n", timestamp_ms=int((now - 40 + i * 0.02) * 1000)
        )
    p.flush()
    p.close()


def test_start_earliest_ingests_a_2m_backlog_and_detects(
    apache_kafka: ApacheKafka, redis_server: RedisServer, topic_name: str, tmp_path: Path
) -> None:
    create_topic(apache_kafka.bootstrap, topic_name, partitions=4)
    now = time.time()
    produce_backlog(apache_kafka.bootstrap, topic_name, now)
    rules = tmp_path / "rules.toml"
    rules.write_text("[default]\nthreshold = 1000\nttl = 2\ncooldown = 1\n")
    channel = f"hk:{topic_name}"
    url = (
        f"kafka://{apache_kafka.bootstrap}/{topic_name}?group=g-{topic_name}&format=lines"
        "&start=earliest"
    )
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(
            "-s", url, "--redis-url", redis_server.url, "--channel", channel, "--rules", str(rules)
        ) as d:
            end = time.monotonic() + 90
            while d.metric("hotkeyd_source_events_total") < RECORDS * KEYS_PER_RECORD:
                assert time.monotonic() < end, d.metric("hotkeyd_source_events_total")
                time.sleep(0.25)
            assert d.metric("hotkeyd_source_events_total") == RECORDS * KEYS_PER_RECORD
            assert d.metric("hotkeyd_detector_late_events_total") == 0
            assert listener.wait_for(lambda: b"hot:bulk" in listener.hot_keys(), 5)
            assert d.stop() == 0
    finally:
        listener.close()
    assert set(listener.hot_keys()) == {b"hot:bulk"}
    first = next(h for _, m in listener.messages for h in m.hot if h.key == b"hot:bulk")
    assert now - 40 < first.since < now - 38  # found where it began, in event time
    assert first.rate == pytest.approx(2500, rel=0.1)


def test_replay_of_a_kafka_time_range(
    apache_kafka: ApacheKafka, topic_name: str, tmp_path: Path
) -> None:
    """The generated trace (known hot intervals) as counted-lines records stamped with
    their event times, over two partitions; replayed by time range, nothing committed."""
    bs = apache_kafka.bootstrap
    create_topic(bs, topic_name, partitions=2)
    groups: dict[int, list[str]] = {}
    for t, key, count in events():
        groups.setdefault(int(t * 100), []).append(f"{key}\t{count}\n")  # one record per 10 ms
    p = KafkaProducer(bootstrap_servers=bs, linger_ms=20)
    for i, (slot, lines) in enumerate(sorted(groups.items())):
        p.send(topic_name, value="".join(lines).encode(), partition=i % 2, timestamp_ms=slot * 10)
    p.flush()
    p.close()
    rules = tmp_path / "rules.toml"
    rules.write_text(REPLAY_RULES)
    url = f"kafka://{bs}/{topic_name}?format=lines&group=never-used"
    out = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "replay", url, "--rules", str(rules), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["late"] == 0 and doc["malformed"] == 0
    from hotkeyd.detector.intervals import Interval

    ivs = [
        Interval(iv["key"].encode(), iv["db"], iv["rule"], iv["start"], iv["end"], iv["peak"])
        for iv in doc["intervals"]
    ]
    check_intervals(ivs)
    # a time range: only what was hot in [T0+10, T0+13)
    ranged = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "replay",
            url,
            "--rules",
            str(rules),
            "--json",
            "--from",
            str(T0 + 10),
            "--to",
            str(T0 + 13),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ranged.returncode == 0, ranged.stderr
    assert sorted(iv["key"] for iv in json.loads(ranged.stdout)["intervals"]) == [
        "item:1",
        "user:x",
    ]
    # replay never joins or commits for a group
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert "never-used" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
