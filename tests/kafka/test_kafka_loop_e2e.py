"""The closed loop with a Kafka source: reporter SDK -> Kafka -> ``hotkeyd run``.

The apps' Redis clients are instrumented with the Kafka ``Reporter`` (what reaches
Redis is reported to Kafka) and read through ``HotCache`` (what the cache serves is
reported in demand reports). Every read is counted once, on one of the two paths.

Cost: one 30 s scenario and a ~15 s two-daemon one, about 60 s with broker start.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from kafka_testutil import create_topic

from hotkeyd.client.reporter import partition_for
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import KafkaBroker, RedisServer
from tests.client.helpers import wait_until
from tests.client.loop_harness import (
    RULES,
    App,
    Daemon,
    EventWatcher,
    check_loop,
    run_loop,
    running,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = b"product:1"
SECONDS = 30.0


def _url(broker: KafkaBroker, topic: str, group: str) -> str:
    return (
        f"kafka://{broker.bootstrap}/{topic}?group={group}&format=reporter&start=latest"
        "&session_timeout_ms=6000&heartbeat_interval_ms=1000"
    )


def _setup(broker: KafkaBroker, unique: str, tmp_path: Path) -> tuple[str, Namespace, Path]:
    """A 2-partition topic, a namespace and a rules file of one test."""
    topic = f"acc-{unique}"
    create_topic(broker.bootstrap, topic, partitions=2)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    return topic, Namespace(prefix=f"hk-{unique}"), rules


def test_kafka_reporter_and_hotcache_keep_the_key_hot_counting_each_read_once(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    topic, ns, rules = _setup(kafka_broker, unique, tmp_path)
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, b"v")
    watcher = EventWatcher(redis_server.url, ns)
    daemon = Daemon(_url(kafka_broker, topic, f"g-{unique}"), redis_server.url, ns, rules, "d-k")
    with running(daemon, watcher):
        assert wait_until(daemon.healthy, timeout=30), "daemon not up"
        args = ["--url", redis_server.url, "--ns", ns.prefix, "--key", KEY.decode()]
        args += ["--rate", "2000", "--cold-rate", "100", "--seconds", str(SECONDS)]
        args += ["--kafka", f"{kafka_broker.bootstrap}/{topic}"]
        apps = [App(args, tmp_path / f"app{i}.json") for i in range(2)]
        with running(*apps):
            res = run_loop(daemon, watcher, r, apps, KEY, SECONDS)
        assert daemon.metric("hotkeyd_demand_local_accesses_total") > 0.9 * res.app_reads
    r.close()
    check_loop(res, KEY)


def test_two_daemons_in_one_group_each_get_only_their_keys_demand(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    topic, ns, rules = _setup(kafka_broker, unique, tmp_path)
    keys: dict[int, bytes] = {}
    i = 0
    while len(keys) < 2:  # one hot key per partition, so each daemon owns one
        keys.setdefault(partition_for(b"p:%d" % i, 2), b"p:%d" % i)
        i += 1
    r = redis.Redis.from_url(redis_server.url)
    for k in keys.values():
        r.set(k, b"v")
    watcher = EventWatcher(redis_server.url, ns)
    url = _url(kafka_broker, topic, f"g-{unique}")
    daemons = [Daemon(url, redis_server.url, ns, rules, name) for name in ("d-a", "d-b")]
    with running(*daemons, watcher):
        assert wait_until(lambda: all(d.healthy() for d in daemons), timeout=30)
        # cold traffic to both partitions until each daemon consumes some: the group settled
        warm = ["--url", redis_server.url, "--ns", ns.prefix, "--kafka", f"{kafka_broker.bootstrap}/{topic}"]  # fmt: skip
        warm += ["--rate", "20", "--seconds", "20"]
        warm_keys = [f"warm:{i}".encode() for i in range(16)]
        assert {partition_for(k, 2) for k in warm_keys} == {0, 1}
        warmer = App(
            [*warm, *(a for k in warm_keys for a in ("--key", k.decode()))], tmp_path / "warm.json"
        )
        with running(warmer):
            assert wait_until(
                lambda: all(d.metric("hotkeyd_source_events_total") > 0 for d in daemons),
                timeout=45,
            ), "the consumer group did not give each daemon a partition"
        args = ["--url", redis_server.url, "--ns", ns.prefix, "--kafka", f"{kafka_broker.bootstrap}/{topic}"]  # fmt: skip
        args += ["--rate", "1500", "--cold-rate", "50", "--seconds", "12"]
        args += [a for k in keys.values() for a in ("--key", k.decode())]
        apps = [App(args, tmp_path / f"app{i}.json") for i in range(2)]
        with running(*apps):
            for k in keys.values():
                watcher.wait_hot(k, timeout=15)
            time.sleep(4)
            owners = {d.instance: {e["key"] for e in d.topk()["hot"]} for d in daemons}
            for a in apps:
                a.wait(60)
        local = {d.instance: d.metric("hotkeyd_demand_local_accesses_total") for d in daemons}
        misrouted = {
            d.instance: d.metric("hotkeyd_demand_entries_ignored_total", reason="not_hot")
            for d in daemons
        }
    r.close()
    # each key is hot in exactly one daemon, and each daemon owns one
    assert sorted(len(v) for v in owners.values()) == [1, 1], owners
    assert set().union(*owners.values()) == {k.decode() for k in keys.values()}
    # each daemon got demand for its own key only: nothing arrived for a key it does not own
    assert all(n > 1000 for n in local.values()), local
    assert misrouted == {"d-a": 0, "d-b": 0}, misrouted
    for k in keys.values():
        assert len(watcher.seen.of("hot", k)) == 1
