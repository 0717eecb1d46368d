"""Reporter SDK: end to end through a real broker into KafkaSource, thread safety, bounds."""

from __future__ import annotations

import collections
import threading
import time

import pytest
import redis
from kafka_testutil import count_batches, create_topic, drain, read_all, settings

from hotkeyd.client.reporter import Reporter, command_keys, instrument, partition_for
from hotkeyd.errors import ClientError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.formats import RecordDecoder
from hotkeyd.sources.kafka.source import KafkaSource
from hotkeyd.testing import KafkaBroker, RedisServer, free_port

PARTITIONS = 4


def consume(
    bootstrap: str, topic: str, expected_total: int, group: str
) -> collections.Counter[bytes]:
    src = KafkaSource(settings(bootstrap, topic, group=group, format="reporter"), metrics=Metrics())
    src.start()
    counters: dict[int, collections.Counter[bytes]] = {}
    try:
        assert drain(
            [src], lambda: sum(counters.get(0, {}).values()) >= expected_total, counters=counters
        )
        drain([src], lambda: False, timeout=0.5, counters=counters)
    finally:
        src.close()
    return counters.get(0, collections.Counter())


@pytest.mark.integration
def test_recorded_counts_arrive_exactly_and_key_partitioned(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=PARTITIONS)
    expected: collections.Counter[bytes] = collections.Counter()
    odd_keys = [
        b"tab\tkey",
        b"new\nline",
        b"{json-looking",
        b"\xff\xfe binary",
        b"cr\r",
        "ünïcode".encode(),
    ]
    with Reporter(kafka_broker.bootstrap, topic, flush_interval=0.05) as rep:
        for i in range(5000):
            k = b"item:hot" if i % 5 == 0 else b"item:%d" % (i % 300)
            rep.record(k)
            expected[k] += 1
        for k in odd_keys:
            rep.record(k, 3)
            expected[k] += 3
        rep.record("item:hot", 10)  # str and bytes spellings are the same key
        expected[b"item:hot"] += 10
        time.sleep(0.3)  # several flush intervals: counts travel in more than one flush
        rep.record(b"item:late", 7)
        expected[b"item:late"] += 7
    assert rep.dropped == 0
    assert rep.stats()["accesses_sent"] == sum(expected.values())
    got = consume(kafka_broker.bootstrap, topic, sum(expected.values()), f"g-{unique}")
    assert got == expected

    # Every message went to the partition of each of its keys (murmur3 of the key).
    records = read_all(kafka_broker.bootstrap, topic, rep.stats()["messages_sent"])
    assert len(records) == rep.stats()["messages_sent"]
    decoder = RecordDecoder("reporter")
    for r in records:
        batches, bad = decoder.decode([r])
        assert not bad
        for key in count_batches(batches):
            assert partition_for(key, PARTITIONS) == r.partition
    assert len({r.partition for r in records}) == PARTITIONS


@pytest.mark.integration
def test_threads_recording_concurrently_lose_nothing(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=PARTITIONS)
    threads, per_thread = 8, 20_000
    rep = Reporter(kafka_broker.bootstrap, topic, flush_interval=0.02)
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            rep.record(b"k%d" % (i % 50), 1 + (t % 2))  # same keys from every thread

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rep.close()
    total = sum(per_thread * (1 + (t % 2)) for t in range(threads))
    assert rep.dropped == 0
    got = consume(kafka_broker.bootstrap, topic, total, f"g-{unique}")
    assert sum(got.values()) == total
    assert set(got) == {b"k%d" % i for i in range(50)}
    assert all(n == total // 50 for n in got.values())


@pytest.mark.integration
def test_full_buffer_drops_and_counts_instead_of_growing(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=PARTITIONS)
    rep = Reporter(
        kafka_broker.bootstrap, topic, flush_interval=3600, max_keys=100
    )  # no timed flush
    threads = 4

    def work(t: int) -> None:
        for i in range(1000):
            rep.record(b"t%d-k%d" % (t, i), 2)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert rep.stats()["buffered_keys"] == 100
    assert rep.dropped == (threads * 1000 - 100) * 2
    rep.record(b"t0-k0")  # a key already buffered still counts when full
    rep.close()
    got = consume(kafka_broker.bootstrap, topic, 201, f"g-{unique}")
    assert sum(got.values()) == 201
    assert len(got) == 100


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_unreachable_kafka_never_blocks_the_app() -> None:
    rep = Reporter(f"127.0.0.1:{free_port()}", "t", flush_interval=0.05, max_keys=10)
    try:
        t0 = time.monotonic()
        for i in range(1000):
            rep.record(b"k%d" % (i % 20))
        assert time.monotonic() - t0 < 1.0  # record() does no I/O (a bound, not a speed claim)
        assert rep.flush(timeout=1) is False
        assert rep.stats()["buffered_keys"] <= 10  # unsent counts kept, bounded
        assert rep.dropped == 500  # keys 10..19 did not fit
    finally:
        unsent = rep.close(timeout=1)
    assert unsent == 500 and rep.unsent_at_close == 500  # keys 0..9, still buffered
    assert rep.dropped == 1000  # every access not sent is counted, none lost silently
    assert rep.close() == 500  # idempotent


def test_bad_arguments() -> None:
    with pytest.raises(ClientError):
        Reporter("127.0.0.1:1", "t", flush_interval=0)
    with pytest.raises(ClientError):
        Reporter("127.0.0.1:1", "t", max_keys=0)


def test_partition_for_is_stable_murmur3() -> None:
    import mmh3

    assert partition_for(b"user:42", 12) == mmh3.hash(b"user:42", 0, signed=False) % 12
    assert partition_for(b"", 3) == 0  # murmur3_32("") == 0
    assert len({partition_for(b"k%d" % i, 8) for i in range(200)}) == 8


def test_command_keys_of_common_commands() -> None:
    assert command_keys(("GET", "a")) == ["a"]
    assert command_keys((b"HSET", b"h", b"f", b"v")) == [b"h"]
    assert command_keys(("MGET", "a", "b")) == ["a", "b"]
    assert command_keys(("MSET", "a", 1, "b", 2)) == ["a", "b"]
    assert command_keys(("EVALSHA", "sha", 2, "k1", "k2", "arg")) == ["k1", "k2"]
    assert command_keys(("OBJECT", "ENCODING", "k")) == ["k"]
    assert command_keys(("MEMORY USAGE", "k")) == ["k"]
    assert command_keys(("PING",)) == []
    assert command_keys(("PUBLISH", "chan", "msg")) == []
    assert command_keys(("SCAN", 0)) == []


@pytest.mark.integration
def test_instrumented_redis_client_reports_its_keys(
    kafka_broker: KafkaBroker, redis_server: RedisServer, unique: str
) -> None:
    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    client = redis.Redis.from_url(redis_server.url)
    with Reporter(kafka_broker.bootstrap, topic) as rep:
        r = instrument(client, rep)
        r.set("user:1", "x")
        for _ in range(5):
            assert r.get("user:1") == b"x"
        r.mget("user:1", "user:2")
        r.ping()
        r.publish("chan", "hello")
        pipe = r.pipeline()
        pipe.incr("counter").get("user:1")
        assert pipe.execute() == [1, b"x"]
    client.close()
    got = consume(kafka_broker.bootstrap, topic, 10, f"g-{unique}")
    assert got == {b"user:1": 8, b"user:2": 1, b"counter": 1}


@pytest.mark.integration
def test_counts_over_the_cap_are_capped_and_counted(kafka_broker: KafkaBroker, unique: str) -> None:
    from hotkeyd.clock import ManualClock
    from hotkeyd.protocol.formats import MAX_COUNT

    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    # A clock that never moves must not stop the timed flushes.
    rep = Reporter(kafka_broker.bootstrap, topic, flush_interval=0.05, clock=ManualClock())
    try:
        rep.record(b"big", MAX_COUNT)
        rep.record(b"big", 10)
        rep.record(b"small", 2)
        deadline = time.monotonic() + 15
        while rep.stats()["messages_sent"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rep.stats()["messages_sent"] >= 1  # sent by the timer, before close()
    finally:
        rep.close()
    assert rep.dropped == 10
    got = consume(kafka_broker.bootstrap, topic, MAX_COUNT + 2, f"g-{unique}")
    assert got == {b"big": MAX_COUNT, b"small": 2}


@pytest.mark.integration
def test_partial_flush_failure_counts_each_access_once(
    kafka_broker: KafkaBroker, unique: str
) -> None:
    """Some messages of one flush fail (over the producer's max_request_size): only what
    they carried is dropped and counted; the rest is sent once and counted as sent."""
    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    rep = Reporter(
        kafka_broker.bootstrap,
        topic,
        flush_interval=3600,  # only the explicit flushes
        max_message_bytes=2048,
        producer_kwargs={"max_request_size": 8192},
    )
    small = collections.Counter({b"small:%d" % i: i + 1 for i in range(400)})
    # A key longer than the request limit travels alone in its message, which fails.
    huge = collections.Counter({b"huge:%d:" % i + b"x" * 9000: 5 + i for i in range(3)})
    try:
        for k, n in (small + huge).items():
            rep.record(k, n)
        assert rep.flush(timeout=10)
        st = rep.stats()
    finally:
        rep.close()
    assert st["send_errors"] == 3
    assert st["accesses_sent"] == sum(small.values())
    assert st["dropped"] == rep.dropped == sum(huge.values())  # exactly what failed
    assert st["accesses_in_flight"] == 0 and st["accesses_buffered"] == 0
    assert st["accesses_recorded"] == st["accesses_sent"] + st["dropped"]
    assert st["accesses_requeued"] == 0 and rep.unsent_at_close == 0
    records = read_all(kafka_broker.bootstrap, topic, st["messages_sent"])
    assert len(records) == st["messages_sent"] > 2
    got = count_batches(RecordDecoder("reporter").decode(records)[0])
    assert all(n <= small[k] for k, n in got.items())  # no key more often than recorded
    assert sum(got.values()) == st["accesses_sent"]
    assert got == small


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_bad_counts_and_non_keys_are_recorded_and_dropped() -> None:
    rep = Reporter(f"127.0.0.1:{free_port()}", "t", flush_interval=3600)
    try:
        rep.record(b"k", 0)
        rep.record(b"k", -3)
        rep.record(b"k", 1.5)  # type: ignore[arg-type]
        rep.record(None, 4)  # type: ignore[arg-type]  # not a key: its 4 accesses are dropped
        rep.record(b"k", 2)
        assert rep.dropped == 3
        st = rep.stats()
        assert st["accesses_recorded"] == 9 and st["accesses_buffered"] == 6
    finally:
        assert rep.close(timeout=1) == 2  # b"k": 2 never sent (nothing listens)
    st = rep.stats()
    assert rep.dropped == 9 == st["accesses_recorded"]
    assert st["accesses_sent"] == 0 and st["accesses_buffered"] == 0


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_delivery_timeout_on_a_stalled_broker_is_never_sent_twice(
    kafka_broker: KafkaBroker, unique: str, kafka_python_socket_leaks: None
) -> None:
    """A broker that stops answering (SIGSTOP) past the delivery timeout: the timed-out
    message's outcome is unknown (the broker appends it when it resumes), so its counts
    are dropped and counted, not re-sent: no key arrives twice, nothing goes uncounted."""
    import signal

    topic = f"rep-{unique}"
    create_topic(kafka_broker.bootstrap, topic, partitions=1)
    rep = Reporter(
        kafka_broker.bootstrap,
        topic,
        flush_interval=3600,
        producer_kwargs={"request_timeout_ms": 1000, "delivery_timeout_ms": 1500},
    )
    first = collections.Counter({b"first:%d" % i: i + 1 for i in range(50)})
    then = collections.Counter({b"then:%d" % i: 2 for i in range(50)})
    assert kafka_broker.proc is not None
    try:
        rep.record(b"warm", 1)
        assert rep.flush(timeout=10)  # connected, metadata known
        kafka_broker.proc.send_signal(signal.SIGSTOP)
        try:
            for k, n in first.items():
                rep.record(k, n)
            rep.flush(timeout=0.5)
            deadline = time.monotonic() + 15
            while rep.stats()["accesses_in_flight"] and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            kafka_broker.proc.send_signal(signal.SIGCONT)
        st = rep.stats()
        assert st["accesses_in_flight"] == 0 and st["send_errors"] >= 1
        assert st["dropped"] == sum(first.values()) and st["accesses_requeued"] == 0
        for k, n in then.items():
            rep.record(k, n)
        assert rep.flush(timeout=10)
    finally:
        rep.close()
    st = rep.stats()
    recorded = first + then + collections.Counter({b"warm": 1})
    assert st["accesses_recorded"] == sum(recorded.values()) == st["accesses_sent"] + st["dropped"]
    assert st["accesses_sent"] == sum(then.values()) + 1
    records = read_all(kafka_broker.bootstrap, topic, st["messages_sent"] + 1, timeout=5)
    got = count_batches(RecordDecoder("reporter").decode(records)[0])
    assert all(n <= recorded[k] for k, n in got.items()), got  # never twice
    assert {k: got[k] for k in then} == then
