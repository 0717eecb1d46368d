"""Never blind under lag: real daemons against real Apache Kafka (KRaft).

Each test runs ``hotkeyd run`` as a process, as a user deploys it, with Kafka as the
source and a real Redis for announcements and the history stream.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from apache_broker import ApacheKafka, create_topic
from kafka import KafkaProducer
from service.daemon import Daemon, Listener

from hotkeyd.protocol.wire import HotEntry
from hotkeyd.testing import RedisServer

pytestmark = pytest.mark.integration

RULES = "[default]\nthreshold = 100\nttl = 2\ncooldown = 1\n"


def kafka_url(kb: ApacheKafka, topic: str, group: str, **q: str) -> str:
    query = "&".join(
        f"{k}={v}"
        for k, v in {
            "group": group,
            "format": "key",
            "session_timeout_ms": "30000",  # a 5 s SIGSTOP must not cost the membership
            "heartbeat_interval_ms": "3000",
            **q,
        }.items()
    )
    return f"kafka://{kb.bootstrap}/{topic}?{query}"


class Traffic:
    """Keys produced at steady rates from a thread (one record per access, format=key)."""

    def __init__(self, bootstrap: str, topic: str, rates: dict[bytes, float]) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.topic = topic
        self.rates = dict(rates)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.producer.flush()
        self.producer.close()

    def _run(self) -> None:
        step = 0.02
        carry: dict[bytes, float] = {}
        next_at = time.monotonic()
        while not self._stop.is_set():
            for key, rate in list(self.rates.items()):
                carry[key] = carry.get(key, 0.0) + rate * step
                n = int(carry[key])
                carry[key] -= n
                for _ in range(n):
                    self.producer.send(self.topic, key=key)
            next_at += step
            time.sleep(max(0.0, next_at - time.monotonic()))


def first_hot(listener: Listener, key: bytes) -> tuple[float, HotEntry] | None:
    for t, m in listener.messages:
        for h in m.hot:
            if h.key == key and not m.full:
                return t, h
    return None


BACKGROUND = {b"bg:%d" % i: 40.0 for i in range(20)}  # 40/s each: 5x compressed = 200/s > 100


def test_paused_daemon_announces_from_the_backlog_without_false_hot_keys(
    apache_kafka: ApacheKafka, redis_server: RedisServer, topic_name: str, tmp_path: Path
) -> None:
    create_topic(apache_kafka.bootstrap, topic_name, partitions=2)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    channel = f"hk:{topic_name}"
    listener = Listener(redis_server.url, channel)
    url = kafka_url(apache_kafka, topic_name, f"g-{topic_name}")
    try:
        with (
            Daemon(
                "-s",
                url,
                "--redis-url",
                redis_server.url,
                "--channel",
                channel,
                "--rules",
                str(rules),
            ) as d,
            Traffic(apache_kafka.bootstrap, topic_name, BACKGROUND) as traffic,
        ):
            end = time.monotonic() + 30
            while d.metric("hotkeyd_source_events_total") < 500 and time.monotonic() < end:
                time.sleep(0.2)
            time.sleep(1.0)
            d.signal(signal.SIGSTOP)
            stopped = time.time()
            time.sleep(1.0)
            traffic.rates[b"hot:1"] = 300.0  # turns hot while the daemon is stopped
            time.sleep(4.0)
            resumed_mono, resumed = time.monotonic(), time.time()
            d.signal(signal.SIGCONT)
            assert listener.wait_for(lambda: first_hot(listener, b"hot:1") is not None, 10)
            got = first_hot(listener, b"hot:1")
            assert got is not None
            at, entry = got
            delay = at - resumed_mono
            print(f"hot:1 announced {delay:.3f}s after SIGCONT; lag_ms={entry.lag_ms}")
            assert delay <= 1.0 + 0.5  # 1 s target; 0.5 s margin for a loaded CI box
            assert stopped < entry.since < resumed - 1.0  # in event time
            assert (
                entry.lag_ms is not None and entry.as_of is not None and entry.as_of >= entry.since
            )
            time.sleep(3.0)  # the rest of the backlog and live traffic
            assert d.stop() == 0
    finally:
        listener.close()
    assert set(listener.hot_keys()) == {b"hot:1"}, "a compressed backlog must not look hot"


def history_json(redis_url: str, *args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "history", "--redis-url", redis_url, "--json", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_restart_catches_up_on_a_30s_backlog_from_committed_offsets(
    apache_kafka: ApacheKafka, redis_server: RedisServer, topic_name: str, tmp_path: Path
) -> None:
    bs = apache_kafka.bootstrap
    create_topic(bs, topic_name, partitions=2)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    channel = f"hk:{topic_name}"
    url = kafka_url(apache_kafka, topic_name, f"g-{topic_name}", start="earliest")
    args = ("-s", url, "--redis-url", redis_server.url, "--channel", channel, "--rules", str(rules))
    p = KafkaProducer(bootstrap_servers=bs, linger_ms=5)
    with Daemon(*args) as d:
        p.send(topic_name, key=b"first", partition=0)
        p.send(topic_name, key=b"first", partition=1)
        p.flush()
        end = time.monotonic() + 30
        while d.metric("hotkeyd_source_events_total") < 2 and time.monotonic() < end:
            time.sleep(0.1)
        assert d.metric("hotkeyd_source_events_total") == 2
        time.sleep(1.0)  # offsets committed
        assert d.stop() == 0
    # 30 s of traffic while no daemon runs: background, and hot:late at 300/s for 10 s
    now = time.time()
    backlog = [(now - 30 + i / 800, b"bg:%d" % (i % 20)) for i in range(30 * 800)]
    backlog += [(now - 25 + i / 300, b"hot:late") for i in range(10 * 300)]
    for t, key in sorted(backlog):  # as producers write: in time order
        p.send(topic_name, key=key, timestamp_ms=int(t * 1000))
    p.flush()
    p.close()
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(*args) as d:
            started = time.monotonic()
            assert listener.wait_for(lambda: b"hot:late" in listener.cool_keys(), 20), d.stderr
            took = time.monotonic() - started
            print(f"30 s backlog: hot and cooled again {took:.2f}s after the restart")
            end = time.monotonic() + 20
            while d.metric("hotkeyd_source_events_total") < 27_000 and time.monotonic() < end:
                time.sleep(0.2)
            assert d.metric("hotkeyd_detector_late_events_total") == 0
            assert d.metric("hotkeyd_source_events_total") == 30 * 800 + 10 * 300  # all rated
            assert d.stop() == 0
    finally:
        listener.close()
    got = first_hot(listener, b"hot:late")
    assert got is not None
    entry = got[1]
    assert now - 25 < entry.since < now - 24  # when it was hot, not when read
    assert entry.lag_ms is not None and entry.lag_ms >= 15_000
    assert set(listener.hot_keys()) == {b"hot:late"}
    rows = history_json(redis_server.url, "--since", "5m", "--key", "hot:*")
    assert [r["key"] for r in rows] == ["hot:late"]
    assert 9 <= float(rows[0]["duration"]) <= 12.5  # type: ignore[arg-type]  # 10 s + cool-down, event time
