"""The conformance vectors in spec/vectors/ run against the Python client.

Every client language runs the same files (spec/README.md describes them); a vector
that fails here is a bug in the Python client or in the vector.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from hotkeyd.client.aio import AsyncSubscriber
from hotkeyd.client.demand import DemandCounter
from hotkeyd.client.hotset import HotSet
from hotkeyd.client.invalidation import decode_invalidation, encode_invalidation
from hotkeyd.client.reporter import partition_for
from hotkeyd.client.sharded import ShardedCounter
from hotkeyd.client.subscriber import Subscriber
from hotkeyd.clock import ManualClock
from hotkeyd.protocol.demand import DemandEntry
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.protocol.wire import Namespace, WireError, decode_key, encode_key
from hotkeyd.testing import RedisServer

VECTORS = Path(__file__).resolve().parents[2] / "spec" / "vectors"


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return obj


def ident(entry: dict[str, Any]) -> tuple[bytes, int]:
    return decode_key(entry), int(entry.get("db", 0))


# ------------------------------------------------------------------ hot set
class Driver:
    """A client fed by a vector, through the subscriber's own entry points.

    The real :class:`Subscriber` on a manual clock, against a real redis-server: a
    ``snapshot`` step writes the snapshot and a heartbeat as the daemon does, ``bootstrap``
    is the subscriber's bootstrap, and a ``message`` goes to :meth:`Subscriber.on_message`,
    the handler the live subscription calls (so a gap resyncs from Redis). The outcome is
    read from the subscriber's counters.
    """

    def __init__(
        self,
        doc: dict[str, Any],
        client: redis.Redis,
        prefix: str,
        subscriber: type[Subscriber] | type[AsyncSubscriber] = Subscriber,
    ) -> None:
        self.clock = ManualClock(start=doc["start_ms"] / 1000.0, epoch=doc["now_s"])
        self.hot_events: list[bytes] = []
        self.cool_events: list[bytes] = []
        hs = HotSet(
            self.clock,
            on_hot=lambda e: self.hot_events.append(e.key),
            on_cool=self.cool_events.append,
        )
        self.ns = Namespace(prefix)
        self.redis = client
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sub: Any  # a Subscriber or an AsyncSubscriber (or a scratch copy of one)
        self.aclient: aioredis.Redis | None = None
        make: Any = subscriber
        if inspect.iscoroutinefunction(subscriber.on_message):  # a scratch copy too
            # The asyncio subscriber on its own loop, with an asyncio client of its own.
            self.loop = asyncio.new_event_loop()
            kw = client.connection_pool.connection_kwargs
            self.aclient = aioredis.Redis(host=kw["host"], port=kw["port"])
            self.sub = make(self.aclient, hs, namespace=self.ns, clock=self.clock)
        else:
            self.sub = make(client, hs, namespace=self.ns, clock=self.clock)
        self.instances: set[str] = set()

    def _run(self, result: Any) -> None:
        """Await what the asyncio subscriber returns; the thread one returns None."""
        if self.loop is not None:
            self.loop.run_until_complete(result)

    def _heartbeats(self) -> None:
        """The daemons stay alive through a case: their heartbeats follow the clock."""
        if self.instances:
            now = self.clock.time()
            self.redis.zadd(self.ns.instances, dict.fromkeys(self.instances, now))

    def step(self, step: dict[str, Any]) -> str | None:
        op = step["op"]
        stats = self.sub.stats
        if op == "snapshot":
            instance = step["data"]["instance"]
            self.redis.set(self.ns.snapshot(instance), json.dumps(step["data"]))
            self.instances.add(instance)
            self._heartbeats()
            return None
        if op == "bootstrap":
            self._heartbeats()
            self._run(self.sub._bootstrap())  # what a (re)subscription runs
            return None
        if op == "advance":
            self.clock.advance(step["ms"] / 1000.0)
            self.sub.hotset.expire()
            return None
        assert op == "message", op
        self._heartbeats()
        raw = (step["raw"] if "raw" in step else json.dumps(step["data"])).encode("utf-8")
        raw = raw.ljust(step.get("pad_to", 0), b" ")
        before = replace(stats)
        self._run(self.sub.on_message(raw))
        if stats.bad_messages > before.bad_messages:
            return "bad"
        if stats.suspect > before.suspect:
            return "suspect"
        if stats.resyncs > before.resyncs:
            return "resynced"
        if stats.applied > before.applied:
            return "applied"
        return "stale" if stats.stale > before.stale else ""

    def hot(self) -> set[tuple[bytes, int]]:
        now = self.clock.monotonic()
        hs = self.sub.hotset
        # items is keyed by ident(key, db): the bytes for db 0, (bytes, db) otherwise
        return {(it.entry.key, it.entry.db) for it in list(hs.items.values()) if it.expires > now}

    def close(self) -> None:
        if self.loop is None:
            self.sub.stop()
            return
        self._run(self.sub.stop())
        if self.aclient is not None:
            self._run(self.aclient.aclose())
        self.loop.close()


def run_hotset_case(
    doc: dict[str, Any],
    case: dict[str, Any],
    client: redis.Redis,
    subscriber: type[Subscriber] | type[AsyncSubscriber] = Subscriber,
) -> None:
    """Run one case of a file in the hotset.json format; AssertionError names the step."""
    d = Driver(doc, client, f"vec-{uuid.uuid4().hex[:12]}", subscriber)
    try:
        for i, step in enumerate(case["steps"]):
            d.hot_events.clear()
            d.cool_events.clear()
            where = f"{case['name']} step {i} ({step['op']})"
            skipped = d.sub.stats.bad_entries
            outcome = d.step(step)
            assert d.sub.stats.bad_entries - skipped == step.get("skipped", 0), where
            if "outcome" in step:
                want = step["outcome"]
                assert outcome == want, f"{where}: outcome {outcome!r}, want {want!r}"
            if "hot" in step:
                assert d.hot() == {ident(e) for e in step["hot"]}, where
            if "became_hot" in step:
                want_hot = sorted(decode_key(e) for e in step["became_hot"])
                assert sorted(d.hot_events) == want_hot, where
            if "cooled" in step:
                want_cool = sorted(decode_key(e) for e in step["cooled"])
                assert sorted(d.cool_events) == want_cool, where
    finally:
        d.close()


HOTSET = load("hotset.json")


@pytest.fixture(scope="module")
def vector_redis(shared_redis: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(shared_redis.url)
    yield client
    client.close()


SUBSCRIBERS = {"thread": Subscriber, "asyncio": AsyncSubscriber}


@pytest.mark.parametrize("kind", sorted(SUBSCRIBERS))
@pytest.mark.parametrize("case", HOTSET["cases"], ids=[c["name"] for c in HOTSET["cases"]])
def test_hotset_vector(case: dict[str, Any], kind: str, vector_redis: redis.Redis) -> None:
    run_hotset_case(HOTSET, case, vector_redis, SUBSCRIBERS[kind])


# ------------------------------------------------------------------- keys
KEYS = load("keys.json")


def _native(inp: dict[str, Any]) -> Any:
    if inp["type"] == "bytes":
        return bytes.fromhex(inp["hex"])
    return inp["value"]


@pytest.mark.parametrize("case", KEYS["encode"], ids=[c["name"] for c in KEYS["encode"]])
def test_key_encoding_vector(case: dict[str, Any]) -> None:
    value = _native(case["input"])
    if case.get("error") == "type":
        with pytest.raises(TypeError):
            key_bytes(value)
        return
    if case.get("error") == "value":
        with pytest.raises(ValueError):
            key_bytes(value)
        return
    kb = key_bytes(value)
    assert kb == bytes.fromhex(case["bytes_hex"])
    assert encode_key(kb) == case["wire"]
    assert decode_key(case["wire"]) == kb


@pytest.mark.parametrize("case", KEYS["decode"], ids=[c["name"] for c in KEYS["decode"]])
def test_key_decoding_vector(case: dict[str, Any]) -> None:
    if case.get("error"):
        with pytest.raises(WireError):
            decode_key(case["wire"])
    else:
        assert decode_key(case["wire"]) == bytes.fromhex(case["bytes_hex"])


# -------------------------------------------------------------- partitions
PARTITION = load("partition.json")


def test_reporter_partition_vectors() -> None:
    for case in PARTITION["reporter"]["cases"]:
        key = decode_key(case)
        for parts, expected in case["partition"].items():
            assert partition_for(key, int(parts)) == expected, (case["key"], parts)


def test_sharded_counter_shard_vectors() -> None:
    for case in PARTITION["sharded"]["cases"]:
        key = decode_key(case)
        for shards, expected in case["shard"].items():
            counter = ShardedCounter.__new__(ShardedCounter)  # routing only: no Redis needed
            counter.shards = int(shards)
            assert counter.shard_of(key) == expected, (case["key"], shards)


# ------------------------------------------------------------ invalidation
INVALIDATION = load("invalidation.json")


@pytest.mark.parametrize(
    "case", INVALIDATION["decode"], ids=[c["name"] for c in INVALIDATION["decode"]]
)
def test_invalidation_decode_vector(case: dict[str, Any]) -> None:
    payload = case["payload"].encode("utf-8")
    if case.get("error"):
        with pytest.raises(WireError):
            decode_invalidation(payload)
        return
    origin, keys = decode_invalidation(payload)
    assert origin == case["origin"]
    assert keys == [decode_key(e) for e in case["drops"]]


@pytest.mark.parametrize(
    "case", INVALIDATION["encode"], ids=[c["name"] for c in INVALIDATION["encode"]]
)
def test_invalidation_encode_vector(case: dict[str, Any]) -> None:
    keys = [bytes.fromhex(h) for h in case["keys_hex"]]
    assert json.loads(encode_invalidation(case["origin"], keys)) == case["json"]


# ------------------------------------------------------------ the schemas
DEMAND = load("demand.json")


def test_vectors_follow_the_schemas() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from hotkeyd.protocol import contract

    notif = jsonschema.Draft202012Validator(contract.schema("notification-v1.json"))
    snap = jsonschema.Draft202012Validator(contract.schema("snapshot-v1.json"))
    inval = jsonschema.Draft202012Validator(contract.schema("invalidation-v1.json"))
    demand = jsonschema.Draft202012Validator(contract.schema("demand-v1.json"))
    for case in HOTSET["cases"]:
        for step in case["steps"]:
            if step["op"] == "snapshot":
                snap.validate(step["data"])
            elif "data" in step:
                valid = step["outcome"] != "bad" and not step.get("skipped")
                assert notif.is_valid(step["data"]) == valid, step
    for case in INVALIDATION["decode"]:
        try:
            obj = json.loads(case["payload"])
        except ValueError:
            assert case.get("error")
            continue
        assert inval.is_valid(obj) == (not case.get("error")), case["name"]
    for case in INVALIDATION["encode"]:
        inval.validate(case["json"])
    for case in DEMAND["cases"]:
        seqs = iter(case["seqs"])
        for msg in case["messages"].values():
            demand.validate({**msg, "seq": next(seqs)})


@pytest.mark.parametrize("case", DEMAND["cases"], ids=[c["name"] for c in DEMAND["cases"]])
def test_demand_vector(case: dict[str, Any]) -> None:
    """One interval of reads -> the reports the app publishes (DemandCounter.message)."""
    clock = ManualClock(start=1000.0, epoch=case["ts"])
    counter = DemandCounter(
        HotSet(clock),
        case["app"],
        Namespace("p"),
        clock,
        interval=case["interval_ms"] / 1000.0,
    )
    counter.next_seq = case["seq"]
    per: dict[str, dict[tuple[bytes, int], int]] = {}
    for r in case["reads"]:
        k = (bytes.fromhex(r["key_hex"]), r["db"])
        inst = per.setdefault(r["instance"], {})
        inst[k] = inst.get(k, 0) + r["n"]
    got: dict[str, dict[str, Any]] = {}
    seqs = []
    for inst in sorted(per):  # type: ignore[assignment]
        before = counter.stats.dropped
        entries = [DemandEntry(k, n, db) for (k, db), n in per[inst].items()]  # type: ignore[index]
        channel, payload, _total = counter.message(inst, entries)  # type: ignore[arg-type]
        assert channel == f"p:demand:{inst}"
        assert counter.stats.dropped - before == case["dropped"][inst]
        msg = json.loads(payload)
        seqs.append(msg.pop("seq"))
        got[inst] = msg  # type: ignore[index]
    assert sorted(seqs) == case["seqs"]
    assert set(got) == set(case["messages"])
    for inst, want in case["messages"].items():
        msg = got[inst]
        assert {k: v for k, v in msg.items() if k != "entries"} == {
            k: v for k, v in want.items() if k != "entries"
        }
        assert {ident(e): e["n"] for e in msg["entries"]} == {
            ident(e): e["n"] for e in want["entries"]
        }
        assert len(msg["entries"]) == len(want["entries"])
        for e in msg["entries"]:
            assert e == {
                **encode_key(ident(e)[0]),
                **({"db": e["db"]} if "db" in e else {}),
                "n": e["n"],
            }


def test_base64_in_vectors_is_standard_padded() -> None:
    for case in KEYS["decode"]:
        w = case["wire"]
        if w.get("enc") == "base64" and not case.get("error"):
            assert base64.b64encode(base64.b64decode(w["key"])).decode() == w["key"]


@pytest.mark.parametrize("case", DEMAND["cases"], ids=[c["name"] for c in DEMAND["cases"]])
def test_demand_encode_vector(case: dict[str, Any]) -> None:
    """The Python client's demand encoder (one interval's reads -> one message per instance)."""
    from hotkeyd.client.demand import DemandCounter
    from hotkeyd.protocol.demand import DemandEntry
    from hotkeyd.protocol.wire import Namespace

    clock = ManualClock(epoch=case["ts"])
    counter = DemandCounter(
        HotSet(clock), case["app"], Namespace("p"), clock, interval=case["interval_ms"] / 1000
    )
    counter.next_seq = case["seq"]
    per: dict[str, list[DemandEntry]] = {}
    for r in case["reads"]:
        per.setdefault(r["instance"], []).append(
            DemandEntry(bytes.fromhex(r["key_hex"]), r["n"], r["db"])
        )
    seqs, dropped = [], {}
    for inst, entries in per.items():
        before = counter.stats.dropped
        channel, payload, _ = counter.message(inst, entries)
        dropped[inst] = counter.stats.dropped - before
        assert channel == f"p:demand:{inst}"
        msg = json.loads(payload)
        seqs.append(msg.pop("seq"))
        want = case["messages"][inst]
        assert {k: v for k, v in msg.items() if k != "entries"} == {
            k: v for k, v in want.items() if k != "entries"
        }
        assert {ident(e): e["n"] for e in msg["entries"]} == {
            ident(e): e["n"] for e in want["entries"]
        }
        assert sorted(map(json.dumps, msg["entries"])) == sorted(map(json.dumps, want["entries"]))
    assert set(per) == set(case["messages"])
    assert sorted(seqs) == sorted(case["seqs"])
    assert dropped == case["dropped"]
