"""RedisPublisher against a real redis-server: round trip, snapshot, outages, overflow."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from hotkeyd.conn.redis import client_from_url
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message, Namespace
from hotkeyd.publish import RedisPublisher
from hotkeyd.testing import RedisServer
from tests.publish.conftest import Subscriber, sample, wait_until

pytestmark = pytest.mark.integration

BINARY = b'\xff\xfe\x00bin "key"\n'


def hot(key: bytes, rate: float = 100.0) -> HotEntry:
    return HotEntry(key=key, rate=rate, rule="default", ttl_ms=5000, since=1.0)


@pytest.fixture
def publishers() -> Iterator[Callable[..., RedisPublisher]]:
    made: list[RedisPublisher] = []

    def make(*args: object, **kw: object) -> RedisPublisher:
        kw.setdefault("heartbeat", 0.2)
        kw.setdefault("backoff_base", 0.05)
        kw.setdefault("backoff_cap", 0.3)
        pub = RedisPublisher(*args, **kw)  # type: ignore[arg-type]
        made.append(pub)
        return pub

    yield make
    for pub in made:
        pub.close(timeout=1.0)


def test_round_trip_binary_keys_and_seq_by_one(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    metrics = Metrics()
    sub = subscribers(redis_server.url, ns.channel)
    pub = publishers(redis_server.url, ns, instance="inst-a", metrics=metrics)
    pub.start()
    first = sub.get()
    assert first.full and first.hot == () and first.instance == "inst-a"  # start = full republish
    wait_until(lambda: pub.healthy, what="healthy")

    pub.publish([hot(b"user:1"), hot(BINARY, 50.0)], [], [])
    pub.publish([], [hot(b"user:1", 120.0)], [CoolEntry(BINARY, "default")])
    pub.publish([hot("ключ".encode())], [], [], final=True)
    msgs = [sub.get() for _ in range(3)]

    assert [m.seq for m in [first, *msgs]] == [
        first.seq,
        first.seq + 1,
        first.seq + 2,
        first.seq + 3,
    ]
    assert {e.key for e in msgs[0].hot} == {b"user:1", BINARY}
    assert msgs[1].hot[0].rate == 120.0 and msgs[1].cool[0].key == BINARY
    assert msgs[2].final and msgs[2].hot[0].key == "ключ".encode()
    # on the wire: the binary key is base64 with "enc", the UTF-8 one is plain text
    assert b'"enc":"base64"' in sub.raw[1] and "ключ".encode() in sub.raw[3]
    wait_until(
        lambda: sample(metrics, "hotkeyd_publish_notifications_total", publisher="redis") == 4,
        what="4 notifications counted",
    )
    assert sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") == 0


def test_snapshot_written_with_expiry_index_and_seq(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    r = redis.Redis.from_url(redis_server.url)
    sub = subscribers(redis_server.url, ns.channel)
    pub = publishers(redis_server.url, ns, instance="snap-1", heartbeat=0.2)
    pub.start()
    sub.get()
    pub.publish([hot(b"a", 10.0), hot(BINARY, 99.0)], [], [])
    pub.update_state(
        [hot(b"a", 10.0), hot(BINARY, 99.0)],
        [{"key": b"a", "rate": 10.0}, {"key": b"z", "rate": 3.0}],
    )
    last = sub.get()

    def snap() -> Message | None:
        raw = r.get(ns.snapshot("snap-1"))
        return None if raw is None else Message.loads(raw)

    wait_until(lambda: (s := snap()) is not None and len(s.top) == 2, what="snapshot with top")
    s = snap()
    assert s is not None
    assert s.full and s.seq >= last.seq
    assert [e.key for e in s.hot] == [BINARY, b"a"]  # highest rate first
    assert [t["key"] for t in s.top] == ["a", "z"]
    ttl = r.pttl(ns.snapshot("snap-1"))
    assert 0 < ttl <= 600  # expiry = 3 heartbeats
    score = r.zscore(ns.instances, "snap-1")
    assert score is not None and abs(score - time.time()) < 30
    # the heartbeat keeps it alive well beyond one expiry period
    time.sleep(0.9)
    assert r.exists(ns.snapshot("snap-1"))
    # state changes without any message reach the snapshot with the next heartbeat
    seq_before = s.seq
    pub.update_state([hot(b"a", 77.0)], [{"key": b"new-top", "rate": 5.0}])
    wait_until(
        lambda: (s := snap()) is not None and s.top[0]["key"] == "new-top", what="top refresh"
    )
    s = snap()
    assert (
        s is not None and s.seq == seq_before and [(e.key, e.rate) for e in s.hot] == [(b"a", 77.0)]
    )
    # clean close removes the snapshot and the index entry
    pub.close(timeout=2.0)
    assert not r.exists(ns.snapshot("snap-1"))
    assert r.zscore(ns.instances, "snap-1") is None
    r.close()


class _GatedFactory:
    """A client factory whose connects can be held back, to order events in a test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()
        self.calls = 0

    def __call__(self) -> redis.Redis:
        self.calls += 1
        if not self.open.is_set():
            self.waiting.set()
            self.open.wait(30)
        return client_from_url(self.url)


def test_redis_killed_publish_never_blocks_and_full_republish_on_reconnect(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    metrics = Metrics()
    factory = _GatedFactory(redis_server.url)
    sub = subscribers(redis_server.url, ns.channel)
    pub = publishers(factory, ns, instance="k1", metrics=metrics)
    pub.start()
    sub.get()
    pub.publish([hot(b"keep-1"), hot(b"goes-cool")], [], [])
    sub.get()

    redis_server.kill()
    returned = 0
    for i in range(300):  # the caller's loop goes on while Redis is gone
        pub.publish([hot(f"during-{i % 5}".encode(), float(i))], [], [])
        returned += 1
    pub.publish([], [], [CoolEntry(b"goes-cool")])
    assert returned == 300
    wait_until(
        lambda: sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") > 0,
        what="failure counted",
    )
    assert not pub.healthy and pub.last_error and "unreachable" in pub.last_error.lower()

    factory.open.clear()  # hold the next reconnect until a subscriber is back
    wait_until(factory.waiting.is_set, what="publisher parked at reconnect")
    republished_before = sample(metrics, "hotkeyd_publish_full_republish_total")
    redis_server.start()
    sub2 = subscribers(redis_server.url, ns.channel)
    factory.open.set()

    msgs = sub2.until(lambda m: m.full)
    full = msgs[-1]
    assert {e.key for e in full.hot} == {b"keep-1"} | {f"during-{i}".encode() for i in range(5)}
    wait_until(
        lambda: sample(metrics, "hotkeyd_publish_full_republish_total") == republished_before + 1,
        what="republish counted",
    )
    wait_until(lambda: pub.healthy, what="healthy again")
    # the snapshot is back too (Redis restarted empty)
    r = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: r.exists(ns.snapshot("k1")), what="snapshot rewritten")
    # later deltas continue the sequence by one
    pub.publish([hot(b"after")], [], [])
    nxt = sub2.get()
    assert nxt.seq == full.seq + 1 and nxt.hot[0].key == b"after"
    r.close()


def test_snapshot_lost_under_live_connection_triggers_full_republish(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    metrics = Metrics()
    sub = subscribers(redis_server.url, ns.channel)
    pub = publishers(redis_server.url, ns, instance="f1", metrics=metrics)
    pub.start()
    sub.get()
    pub.publish([hot(b"x")], [], [])
    sub.get()
    r = redis.Redis.from_url(redis_server.url)
    r.flushall()  # as a restart without persistence would leave it
    full = sub.until(lambda m: m.full)[-1]
    assert [e.key for e in full.hot] == [b"x"]
    wait_until(lambda: r.exists(ns.snapshot("f1")), what="snapshot restored")
    r.close()


def test_queue_overflow_coalesces_into_full_republish(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    metrics = Metrics()
    url = redis_server.url + "?socket_timeout=10"
    sub = subscribers(redis_server.url, ns.channel)
    pub = publishers(url, ns, instance="o1", metrics=metrics, max_pending=5)
    pub.start()
    sub.get()
    wait_until(lambda: pub.healthy, what="healthy")
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("CLIENT", "PAUSE", "1500", "WRITE")  # Redis stalls our sends
    for i in range(60):
        pub.publish([hot(f"k{i}".encode(), float(i))], [], [])
    assert sample(metrics, "hotkeyd_publish_coalesced_total", publisher="redis") > 0
    full = sub.until(lambda m: m.full, timeout=15)[-1]
    assert {e.key for e in full.hot} == {f"k{i}".encode() for i in range(60)}
    assert sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") == 0
    admin.close()


@contextlib.contextmanager
def _blackhole() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a hung Redis)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def test_publish_returns_at_once_when_redis_hangs(
    publishers: Callable[..., RedisPublisher],
) -> None:
    metrics = Metrics()
    with _blackhole() as port:
        # each network call would block for 30 s; the caller must not notice
        url = f"redis://127.0.0.1:{port}/0?socket_timeout=30&socket_connect_timeout=30"
        pub = publishers(url, Namespace(), instance="h1", metrics=metrics, max_pending=10)
        pub.start()
        started = time.monotonic()
        for i in range(500):
            pub.publish([hot(f"k{i}".encode())], [], [])
        pub.publish([], [], [], final=True)
        elapsed = time.monotonic() - started
        assert elapsed < 10.0, f"publish() blocked the caller for {elapsed:.1f}s"
        assert not pub.healthy
        t0 = time.monotonic()
        pub.close(timeout=0.5)
        assert time.monotonic() - t0 < 10.0  # close honours its deadline, not the socket's


def test_unreachable_redis_is_counted_and_logged_not_raised(
    publishers: Callable[..., RedisPublisher], caplog: pytest.LogCaptureFixture
) -> None:
    from hotkeyd.testing import free_port

    metrics = Metrics()
    pub = publishers(
        f"redis://127.0.0.1:{free_port()}/0", Namespace(), instance="u1", metrics=metrics
    )
    with caplog.at_level("WARNING"):
        pub.start()
        for _ in range(50):
            pub.publish([hot(b"a")], [], [])
        wait_until(
            lambda: sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") >= 3,
            what="retries",
        )
    assert pub.last_error is not None and "unreachable" in pub.last_error
    lines = [r for r in caplog.records if "publish failed" in r.getMessage()]
    failures = sample(metrics, "hotkeyd_publish_failures_total", publisher="redis")
    assert 1 <= len(lines) < failures  # rate-limited: fewer lines than failures


def test_client_bootstrap_from_snapshot_then_stream_has_no_gap(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    """Subscribe first, read the snapshot, apply messages with seq > snapshot.seq."""
    ns = Namespace(prefix=f"t{unique}")
    pub = publishers(redis_server.url, ns, instance="b1")
    pub.start()
    for i in range(30):  # traffic before the client arrives
        pub.publish(
            [hot(f"pre-{i}".encode())], [], [CoolEntry(f"pre-{i - 3}".encode())] if i >= 3 else []
        )
    sub = subscribers(redis_server.url, ns.channel)
    stop = threading.Event()

    def traffic() -> None:  # traffic while it bootstraps
        i = 0
        while not stop.is_set() and i < 200:
            pub.publish([hot(f"live-{i}".encode())], [], [CoolEntry(f"live-{i - 2}".encode())])
            i += 1
            time.sleep(0.002)

    t = threading.Thread(target=traffic)
    t.start()
    r = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: r.exists(ns.snapshot("b1")), what="snapshot")
    snap = Message.loads(r.get(ns.snapshot("b1")))  # type: ignore[arg-type]
    t.join()
    state = {e.key for e in snap.hot}
    last = snap.seq
    final_seq = pub.seq
    while last < final_seq:
        m = sub.get()
        if m.seq <= snap.seq:
            continue  # already in the snapshot
        assert m.seq == last + 1, f"gap: {last} -> {m.seq}"
        last = m.seq
        if m.full:
            state = set()
        state |= {e.key for e in m.hot}
        state -= {c.key for c in m.cool}
    assert state == {e.key for e in pub._state.hot_set()}
    assert state >= {b"live-198", b"live-199"}
    r.close()


def test_db_index_from_url_holds_the_snapshot(
    redis_server: RedisServer,
    unique: str,
    publishers: Callable[..., RedisPublisher],
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    ns = Namespace(prefix=f"t{unique}")
    url = f"redis://127.0.0.1:{redis_server.port}/3"
    sub = subscribers(url, ns.channel)  # pub/sub spans databases; keys do not
    pub = publishers(url, ns, instance="db3")
    pub.start()
    pub.publish([hot(b"in-db-3")], [], [])
    sub.until(lambda m: any(e.key == b"in-db-3" for e in m.hot))
    db3 = redis.Redis(host="127.0.0.1", port=redis_server.port, db=3)
    db0 = redis.Redis(host="127.0.0.1", port=redis_server.port, db=0)
    wait_until(lambda: db3.exists(ns.snapshot("db3")), what="snapshot in db 3")
    assert not db0.exists(ns.snapshot("db3")) and db0.zcard(ns.instances) == 0
    db3.close()
    db0.close()


def test_close_accounts_for_a_send_stuck_past_the_deadline(redis_server: RedisServer) -> None:
    """close() used to return with the worker still in a send and unsent == 0 (exit 0)."""
    import os
    import signal

    pub = RedisPublisher(redis_server.url, Namespace(prefix="stuck"), instance="s", heartbeat=5.0)
    pub.start()
    wait_until(lambda: pub.healthy, timeout=10)
    assert redis_server.proc is not None
    os.kill(redis_server.proc.pid, signal.SIGSTOP)  # a hung Redis: accepts, never answers
    try:
        pub.publish([hot(b"k")], final=True)
        time.sleep(0.2)  # the worker is now inside the send, waiting for a reply
        started = time.monotonic()
        pub.close(timeout=0.1)
        assert time.monotonic() - started < 1.5  # close keeps its deadline
        assert pub.unsent >= 1
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
