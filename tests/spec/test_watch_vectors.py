"""spec/vectors/watch.json through the app side of the watch (hotkeyd.client.watchguard).

HotCache and AsyncHotCache feed every heartbeat and invalidation through these same
objects, so a case failing here is a bug in what apps serve.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hotkeyd.client.watchguard import (
    LEASE_S,
    InvalidationIntake,
    WatchLeases,
    decode_heartbeat,
)
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.limits import limit
from hotkeyd.protocol.wire import WireError
from tests.spec import watch_vectors
from tests.spec.test_vectors import load

V = load("watch.json")
KEY = load("auth.json")["key_utf8"].encode()


def test_the_vectors_are_generated() -> None:
    """Stale vectors fail here: rerun ``python tests/spec/watch_vectors.py``."""
    assert (watch_vectors.SPEC / "vectors" / "watch.json").read_text("utf-8") == (
        watch_vectors.render()
    )
    assert V["lease_ms"] == limit("watch_lease_ms") == round(LEASE_S * 1000)


@pytest.mark.parametrize("case", V["decode"], ids=lambda c: c["name"])
def test_decode(case: dict[str, Any]) -> None:
    if not case["ok"]:
        with pytest.raises(WireError):
            decode_heartbeat(case["payload"].encode(), V["now_s"])
        return
    hb = decode_heartbeat(case["payload"].encode(), V["now_s"])
    want = case["heartbeat"]
    assert (hb.instance, hb.node, hb.epoch, hb.up, hb.armed) == (
        want["instance"], want["node"], want["epoch"], want["up"], want["armed"],
    )  # fmt: skip
    assert hb.slots == (None if want["slots"] is None else tuple(map(tuple, want["slots"])))


def _hb(d: dict[str, Any]) -> bytes:
    body = {"v": 1, "ts": V["now_s"], **d}
    return json.dumps(body).encode()


@pytest.mark.parametrize("case", V["leases"], ids=lambda c: c["name"])
def test_leases(case: dict[str, Any]) -> None:
    leases = WatchLeases()
    guard = None
    for step in case["steps"]:
        now = step["at_ms"] / 1000
        if "heartbeat" in step:
            hb = decode_heartbeat(_hb(step["heartbeat"]), V["now_s"])
            assert leases.heard(hb, now) is step["epoch_changed"], step
        elif "guard" in step:
            g = step["guard"]
            guard = leases.guard(g["slot"], [tuple(h) for h in g["hot"]], now)
            want = step["expect"]
            assert guard == (None if want is None else (want[0], tuple(map(tuple, want[1])))), step
        elif "serve" in step:
            assert leases.serves(guard, step["serve"]["slot"], now) is step["expect"], step
        elif step.get("forget"):
            leases.forget()


def gen_payload(gen: dict[str, int]) -> bytes:
    if "bytes" in gen:
        head, tail = '{"v":1,"origin":"', '","keys":[{"key":"x"}]}'
        return (head + "o" * (gen["bytes"] - len(head) - len(tail)) + tail).encode()
    keys = ",".join(f'{{"key":"k{i}"}}' for i in range(gen["keys"]))
    return ('{"v":1,"origin":"o","keys":[' + keys + "]}").encode()


@pytest.mark.parametrize("case", V["intake"], ids=lambda c: c["name"])
def test_intake(case: dict[str, Any]) -> None:
    intake = InvalidationIntake(auth=MessageAuth([KEY]) if case["auth"] else None)
    payload = gen_payload(case["gen"]) if "gen" in case else case["payload"].encode()
    got = intake.receive(payload, 0.0)
    s = intake.stats
    outcome = {"oversized": s.oversized, "unsigned": s.unsigned, "bad": s.bad}
    if case["outcome"] == "applied":
        assert got is not None and not any(outcome.values())
        if "drops_count" in case:
            assert len(got) == case["drops_count"]
        else:
            assert got == [k.encode() for k in case["drops"]]
    else:
        assert got is None
        assert outcome[case["outcome"]] == 1


@pytest.mark.parametrize("case", V["ratelimit"], ids=lambda c: c["name"])
def test_ratelimit(case: dict[str, Any]) -> None:
    intake = InvalidationIntake()
    inval = json.dumps({"v": 1, "origin": "o", "keys": [{"key": "k"}]}).encode()
    applied = []
    for kind, t in case["events"]:
        now = t / 1000
        if kind == "inval":
            if intake.receive(inval, now) == [b"k"]:
                applied.append(t)
        elif intake.due(b"k", now):
            applied.append(t)
    assert applied == case["applied_ms"]
