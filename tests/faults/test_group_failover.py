"""Consumer-group failover with real processes (issue 14's matrix): two daemons in one
group read a Kafka topic, the one announcing the hot key is SIGKILLed, and the test
measures how long until the other one announces it: what clients see as "not hot"."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis

from hotkeyd.client import Subscriber
from hotkeyd.conn.kafka import kafka_python
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import KafkaBroker, RedisServer
from tests.service.daemon import Daemon

from .conftest import seconds_until

pytestmark = pytest.mark.integration

HOT = b"item:hot"


class Producer:
    """Writes the hot key (and some background) at a steady rate from a thread."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 800.0) -> None:
        kafka = kafka_python()
        self.p = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        self.topic, self.rate = topic, rate
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            for _ in range(int(self.rate / 20)):
                self.p.send(self.topic, key=HOT if i % 2 == 0 else b"bg:%d" % (i % 500))
                i += 1
            self._stop.wait(max(0.0, 0.05 - (time.monotonic() - t0)))

    def __enter__(self) -> Producer:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)
        self.p.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_group_member_sigkill_takeover_time(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str, rules_ttl2: str
) -> None:
    topic, ns = f"acc-{unique}", Namespace(prefix=f"hk-{unique}")
    admin = kafka_python().admin.KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([kafka_python().admin.NewTopic(topic, 4, 1)])
    admin.close()
    src = f"kafka://{kafka_broker.bootstrap}/{topic}?group=g-{unique}&format=key"
    args = (
        "-s",
        src,
        "--redis-url",
        redis_server.url,
        "--namespace",
        ns.prefix,
        "--window",
        "0.5",
        "--rules",
        rules_ttl2,
    )
    r = redis.Redis.from_url(redis_server.url)
    sub = Subscriber(r, namespace=ns).start()
    with Daemon(*args, "--instance", "a") as a, Daemon(*args, "--instance", "b") as b:
        daemons = {"a": a, "b": b}
        with Producer(kafka_broker.bootstrap, topic):
            try:
                assert sub.wait_ready(10)
                seconds_until(lambda: HOT in sub.hotset, 60)
                owner = sub.hotset.items[HOT].instance
                other = "b" if owner == "a" else "a"
                proc = daemons[owner].proc
                assert proc is not None
                proc.kill()
                killed = time.monotonic()
                not_hot_from = None
                while time.monotonic() - killed < 60:
                    item = sub.hotset.items.get(HOT)
                    alive = item is not None and item.expires > sub.clock.monotonic()
                    if not alive and not_hot_from is None:
                        not_hot_from = time.monotonic()
                    if alive and item is not None and item.instance == other:
                        break
                    time.sleep(0.02)
                else:
                    raise AssertionError(
                        f"{other} never announced the key: {daemons[other].stderr}"
                    )
                takeover = time.monotonic() - killed
                gap = 0.0 if not_hot_from is None else time.monotonic() - not_hot_from
                print(
                    f"\ngroup member SIGKILL: {other} announced the hot key {takeover:.1f} s "
                    f"after the kill; clients saw it not hot for {gap:.1f} s (TTL 2 s, "
                    f"session timeout 6 s)"
                )
                # 8-12 s on a quiet box (6 s session timeout, then the rebalance); 15.5 s
                # once in a clean-clone CI with its phases sharing the 2 cores. The bound
                # is the worst a loaded box gives, not the speed (benchmarks measure that).
                assert takeover < 20.0
            finally:
                sub.stop()
                r.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_sigterm_with_the_broker_frozen_finishes_in_time(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    """SIGSTOP the broker (its sockets stay open, nothing answers), then SIGTERM the daemon:
    leaving the group and the final commit cannot complete, yet the daemon exits within
    systemd's 15 s stop timeout (it took 30 s)."""
    topic = f"acc-{unique}"
    admin = kafka_python().admin.KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([kafka_python().admin.NewTopic(topic, 2, 1)])
    admin.close()
    src = f"kafka://{kafka_broker.bootstrap}/{topic}?group=g-{unique}&format=key"
    with Daemon("-s", src, "--shutdown-timeout", "5") as d, Producer(kafka_broker.bootstrap, topic):
        seconds_until(lambda: d.metric("hotkeyd_source_events_total") > 500, 60)
        assert kafka_broker.proc is not None
        kafka_broker.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.0)
            t0 = time.monotonic()
            code = d.stop(timeout=30)
            took = time.monotonic() - t0
        finally:
            kafka_broker.proc.send_signal(signal.SIGCONT)
    print(f"\nSIGTERM with the broker frozen: exited {code} after {took:.1f} s")
    assert took < 15.0
