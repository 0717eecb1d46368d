"""Reading snapshots: live instances, pruning stale ones, merging hot sets and tops."""

from __future__ import annotations

import time

import pytest
import redis

from hotkeyd.client.snapshots import fetch_snapshots, list_instances, merge_snapshots, read_merged
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.wire import HotEntry, Message, Namespace
from hotkeyd.publish import MemoryPublisher, RedisPublisher
from hotkeyd.testing import RedisServer
from tests.publish.conftest import wait_until


def hot(key: bytes, rate: float, db: int = 0) -> HotEntry:
    return HotEntry(key=key, rate=rate, rule="default", ttl_ms=3000, since=1.0, db=db)


def _snap(
    instance: str, entries: list[HotEntry], top: list[dict[str, object]], seq: int = 0
) -> Message:
    pub = MemoryPublisher(instance, ManualClock())
    for _ in range(seq):
        pub.publish([], [], [], final=True)
    pub.update_state(entries, top)
    return pub.snapshot()


def test_merge_takes_max_rate_for_hot_and_sums_top() -> None:
    a = _snap(
        "a",
        [hot(b"k1", 10.0), hot(b"\xff", 5.0)],
        [{"key": b"k1", "rate": 10.0}, {"key": b"x", "rate": 2.0}],
        3,
    )
    b = _snap(
        "b",
        [hot(b"k1", 30.0), hot(b"k1", 1.0, db=1)],
        [{"key": b"k1", "rate": 30.0, "hot": True}],
        7,
    )
    merged = merge_snapshots({"b": b, "a": a})
    assert merged.instances == ("a", "b")
    assert merged.seqs == {"a": 3, "b": 7}
    assert [(e.key, e.db, e.rate) for e in merged.hot] == [
        (b"k1", 0, 30.0),
        (b"\xff", 0, 5.0),
        (b"k1", 1, 1.0),
    ]
    assert merged.hot_instances[(b"k1", 0)] == ("a", "b")
    top = {t["key"]: t for t in merged.top}
    assert top["k1"]["rate"] == 40.0 and top["k1"]["instances"] == 2 and top["k1"]["hot"] is True
    assert top["x"]["rate"] == 2.0
    doc = merged.to_json(now=5.0)
    assert doc["hot"][0]["instances"] == ["a", "b"] and doc["ts"] == 5.0
    assert doc["hot"][1]["enc"] == "base64"


def test_merge_of_nothing_is_empty() -> None:
    m = merge_snapshots({})
    assert m.hot == () and m.top == () and m.to_json()["instances"] == []


@pytest.mark.integration
def test_reader_merges_live_instances_read_only_and_the_heartbeat_prunes(
    redis_server: RedisServer, unique: str
) -> None:
    ns = Namespace(prefix=f"s{unique}")
    admin = redis.Redis.from_url(redis_server.url)
    # the reader runs as a user that may only read hotkeyd's keys
    admin.execute_command(
        "ACL", "SETUSER", f"ro{unique}", "on", ">pw", f"~{{{ns.prefix}}}:*",
        "+zrevrangebyscore", "+mget",
    )  # fmt: skip
    r = redis.Redis(port=redis_server.port, username=f"ro{unique}", password="pw")
    # a crashed instance: index entry left behind, snapshot expired
    admin.zadd(ns.instances, {"crashed": time.time()})
    # an ancient instance whose score is far in the past (and a snapshot that lingers)
    admin.zadd(ns.instances, {"ancient": time.time() - 3600})
    admin.set(ns.snapshot("ancient"), _snap("ancient", [hot(b"old", 1.0)], []).dumps())
    # a corrupt snapshot is skipped and counted, not fatal
    admin.zadd(ns.instances, {"corrupt": time.time()})
    admin.set(ns.snapshot("corrupt"), b"{not json")
    pubs = [
        RedisPublisher(redis_server.url, ns, instance=f"live-{i}", heartbeat=0.2) for i in range(2)
    ]
    try:
        for i, pub in enumerate(pubs):
            pub.start()
            pub.publish([hot(b"shared", 10.0 * (i + 1)), hot(f"own-{i}".encode(), 1.0)], [], [])
            pub.update_state(
                [hot(b"shared", 10.0 * (i + 1)), hot(f"own-{i}".encode(), 1.0)],
                [{"key": b"shared", "rate": 10.0 * (i + 1)}],
            )

        def both_live() -> bool:
            snaps = fetch_snapshots(r, ns)
            return all(len(snaps.get(f"live-{i}", Message("", 0, 0)).top) == 1 for i in range(2))

        wait_until(both_live, what="both snapshots with top")
        bad: list[str] = []
        snaps = fetch_snapshots(r, ns, on_bad=lambda inst, exc: bad.append(inst))
        assert set(snaps) == {"live-0", "live-1"} and bad == ["corrupt"]
        assert all(s.full for s in snaps.values())
        # the readers wrote nothing; the daemons' heartbeats pruned only the ancient member
        members = {m.decode() for m in admin.zrange(ns.instances, 0, -1)}  # type: ignore[union-attr]
        assert members == {"live-0", "live-1", "corrupt", "crashed"}
        doc = read_merged(r, ns)
        assert doc["instances"] == ["live-0", "live-1"]
        assert doc["bad_snapshots"] == ["corrupt"]
        hot_keys = [e["key"] for e in doc["hot"]]
        assert hot_keys[0] == "shared" and doc["hot"][0]["rate"] == 20.0
        assert set(hot_keys) == {"shared", "own-0", "own-1"}
        assert doc["top"][0] == {"key": "shared", "rate": 30.0, "instances": 2}
        assert set(doc["seqs"]) == {"live-0", "live-1"}
        assert (
            list_instances(r, ns, clock=ManualClock(epoch=time.time() + 3600)) == []
        )  # all too old now
    finally:
        for pub in pubs:
            pub.close(timeout=1.0)
        r.close()
        admin.close()
