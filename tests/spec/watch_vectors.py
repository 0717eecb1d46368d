"""Generate spec/vectors/watch.json: ``python tests/spec/watch_vectors.py``.

The cases are written here once; the signatures of the auth cases are computed with the
key of spec/vectors/auth.json, so the file cannot drift from the signing rule.
tests/spec/test_watch_vectors.py checks the committed file equals :func:`render`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[2] / "spec"
NOW_S = 1764480000.0


def _hb(**kw: Any) -> str:
    body = {"v": 1, "instance": "d1", "node": "n1:6379", "epoch": 3, "up": True, "keys": 1}
    body.update(kw)
    body.setdefault("ts", NOW_S)
    return json.dumps(body, separators=(",", ":"))


def _sign(body: str, key: bytes) -> str:
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    return body[:-1] + ',"sig":"' + mac + '"}'


def build() -> dict[str, Any]:
    auth = json.loads((SPEC / "vectors" / "auth.json").read_text("utf-8"))
    key = auth["key_utf8"].encode()
    lim = {
        n: s["value"] for n, s in json.loads((SPEC / "limits.json").read_text())["limits"].items()
    }
    ok = {"instance": "d1", "node": "n1:6379", "epoch": 3, "up": True}
    decode: list[dict[str, Any]] = [
        {
            "name": "plain node",
            "payload": _hb(armed=42),
            "ok": True,
            "heartbeat": {**ok, "armed": 42, "slots": None},
        },
        {
            "name": "armed absent means 0",
            "payload": _hb(),
            "ok": True,
            "heartbeat": {**ok, "armed": 0, "slots": None},
        },
        {
            "name": "cluster primary with slots",
            "payload": _hb(armed=7, slots=[[0, 5460], [10923, 10923]]),
            "ok": True,
            "heartbeat": {**ok, "armed": 7, "slots": [[0, 5460], [10923, 10923]]},
        },
        {
            "name": "down",
            "payload": _hb(up=False, armed=0),
            "ok": True,
            "heartbeat": {**ok, "up": False, "armed": 0, "slots": None},
        },
        {
            "name": "unknown fields ignored",
            "payload": _hb(armed=1, extra={"a": 1}),
            "ok": True,
            "heartbeat": {**ok, "armed": 1, "slots": None},
        },
        {"name": "not JSON", "payload": '{"v":1,', "ok": False},
        {"name": "not an object", "payload": "[1]", "ok": False},
        {"name": "v 2", "payload": _hb(v=2), "ok": False},
        {"name": "v true", "payload": _hb(v=True), "ok": False},
        {"name": "no instance", "payload": _hb(instance=None), "ok": False},
        {"name": "empty node", "payload": _hb(node=""), "ok": False},
        {
            "name": "instance too long",
            "payload": _hb(instance="i" * (lim["name_chars_max"] + 1)),
            "ok": False,
        },
        {"name": "negative epoch", "payload": _hb(epoch=-1), "ok": False},
        {"name": "epoch a float", "payload": _hb(epoch=1.5), "ok": False},
        {"name": "epoch above seq_max", "payload": _hb(epoch=lim["seq_max"] + 1), "ok": False},
        {"name": "up not a boolean", "payload": _hb(up=1), "ok": False},
        {"name": "armed a string", "payload": _hb(armed="1"), "ok": False},
        {"name": "ts missing", "payload": _hb(ts=None), "ok": False},
        {
            "name": "ts far in the future",
            "payload": _hb(ts=NOW_S + lim["clock_skew_s_max"] + 1),
            "ok": False,
        },
        {"name": "slot range reversed", "payload": _hb(slots=[[10, 5]]), "ok": False},
        {"name": "slot past 16383", "payload": _hb(slots=[[0, 16384]]), "ok": False},
        {"name": "slots not a list", "payload": _hb(slots={"0": 1}), "ok": False},
    ]
    # A None field above means "absent".
    for c in decode:
        payload = str(c["payload"])
        if payload.startswith("{") and payload.endswith("}"):
            obj = json.loads(payload)
            c["payload"] = json.dumps(
                {k: v for k, v in obj.items() if v is not None}, separators=(",", ":")
            )
    hb1 = {"instance": "d1", "node": "n1:6379", "epoch": 3, "up": True, "armed": 10}
    leases = [
        {
            "name": "armed and fresh: guarded, served until the lease runs out",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {
                    "at_ms": 50,
                    "guard": {"slot": 100, "hot": [["d1", 10]]},
                    "expect": ["d1", [["n1:6379", 3]]],
                },
                {"at_ms": 299, "serve": {"slot": 100}, "expect": True},
                {"at_ms": 300, "serve": {"slot": 100}, "expect": False},
                {"at_ms": 350, "heartbeat": hb1, "epoch_changed": False},
                {"at_ms": 360, "serve": {"slot": 100}, "expect": True},
            ],
        },
        {
            "name": "announced after armed: no guard (not watched yet)",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {"at_ms": 10, "guard": {"slot": 100, "hot": [["d1", 11]]}, "expect": None},
                {"at_ms": 20, "serve": {"slot": 100}, "expect": False},
                {"at_ms": 100, "heartbeat": {**hb1, "armed": 11}, "epoch_changed": False},
                {
                    "at_ms": 110,
                    "guard": {"slot": 100, "hot": [["d1", 11]]},
                    "expect": ["d1", [["n1:6379", 3]]],
                },
                {"at_ms": 120, "serve": {"slot": 100}, "expect": True},
            ],
        },
        {
            "name": "no heartbeat at all: no guard",
            "steps": [{"at_ms": 0, "guard": {"slot": 1, "hot": [["d1", 1]]}, "expect": None}],
        },
        {
            "name": "stale heartbeat: no guard",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {"at_ms": 300, "guard": {"slot": 1, "hot": [["d1", 1]]}, "expect": None},
            ],
        },
        {
            "name": "watch down: no guard, a copy stops being served",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {
                    "at_ms": 10,
                    "guard": {"slot": 1, "hot": [["d1", 1]]},
                    "expect": ["d1", [["n1:6379", 3]]],
                },
                {
                    "at_ms": 50,
                    "heartbeat": {**hb1, "up": False, "armed": 0},
                    "epoch_changed": False,
                },
                {"at_ms": 60, "serve": {"slot": 1}, "expect": False},
                {"at_ms": 70, "guard": {"slot": 1, "hot": [["d1", 1]]}, "expect": None},
            ],
        },
        {
            "name": "new epoch: the copy is not served (and every copy drops)",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {
                    "at_ms": 10,
                    "guard": {"slot": 1, "hot": [["d1", 1]]},
                    "expect": ["d1", [["n1:6379", 3]]],
                },
                {"at_ms": 100, "heartbeat": {**hb1, "epoch": 4}, "epoch_changed": True},
                {"at_ms": 110, "serve": {"slot": 1}, "expect": False},
                {
                    "at_ms": 120,
                    "guard": {"slot": 1, "hot": [["d1", 1]]},
                    "expect": ["d1", [["n1:6379", 4]]],
                },
                {"at_ms": 130, "serve": {"slot": 1}, "expect": True},
            ],
        },
        {
            "name": "another instance's heartbeat does not vouch",
            "steps": [
                {"at_ms": 0, "heartbeat": {**hb1, "instance": "d2"}, "epoch_changed": False},
                {"at_ms": 10, "guard": {"slot": 1, "hot": [["d1", 1]]}, "expect": None},
            ],
        },
        {
            "name": "second instance vouches when the first cannot",
            "steps": [
                {"at_ms": 0, "heartbeat": {**hb1, "up": False}, "epoch_changed": False},
                {
                    "at_ms": 0,
                    "heartbeat": {**hb1, "instance": "d2", "armed": 5},
                    "epoch_changed": False,
                },
                {
                    "at_ms": 10,
                    "guard": {"slot": 1, "hot": [["d1", 1], ["d2", 5]]},
                    "expect": ["d2", [["n1:6379", 3]]],
                },
            ],
        },
        {
            "name": "cluster: the slot's primary vouches, others are not needed",
            "steps": [
                {
                    "at_ms": 0,
                    "heartbeat": {**hb1, "node": "a:1", "slots": [[0, 8191]]},
                    "epoch_changed": False,
                },
                {
                    "at_ms": 0,
                    "heartbeat": {**hb1, "node": "b:1", "slots": [[8192, 16383]], "up": False},
                    "epoch_changed": False,
                },
                {
                    "at_ms": 10,
                    "guard": {"slot": 100, "hot": [["d1", 1]]},
                    "expect": ["d1", [["a:1", 3]]],
                },
                {"at_ms": 20, "serve": {"slot": 100}, "expect": True},
                {"at_ms": 30, "guard": {"slot": 9000, "hot": [["d1", 1]]}, "expect": None},
            ],
        },
        {
            "name": "cluster: slot moved away from the copy's node",
            "steps": [
                {
                    "at_ms": 0,
                    "heartbeat": {**hb1, "node": "a:1", "slots": [[0, 16383]]},
                    "epoch_changed": False,
                },
                {
                    "at_ms": 10,
                    "guard": {"slot": 100, "hot": [["d1", 1]]},
                    "expect": ["d1", [["a:1", 3]]],
                },
                {
                    "at_ms": 100,
                    "heartbeat": {**hb1, "node": "a:1", "slots": [[200, 16383]]},
                    "epoch_changed": False,
                },
                {"at_ms": 110, "serve": {"slot": 100}, "expect": False},
            ],
        },
        {
            "name": "two plain nodes: both must vouch",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {
                    "at_ms": 0,
                    "heartbeat": {**hb1, "node": "n2:6379", "epoch": 1},
                    "epoch_changed": False,
                },
                {
                    "at_ms": 10,
                    "guard": {"slot": 1, "hot": [["d1", 1]]},
                    "expect": ["d1", [["n1:6379", 3], ["n2:6379", 1]]],
                },
                {
                    "at_ms": 100,
                    "heartbeat": {**hb1, "node": "n2:6379", "epoch": 1, "up": False},
                    "epoch_changed": False,
                },
                {"at_ms": 110, "serve": {"slot": 1}, "expect": False},
            ],
        },
        {
            "name": "forget (subscription lost): nothing vouches",
            "steps": [
                {"at_ms": 0, "heartbeat": hb1, "epoch_changed": False},
                {
                    "at_ms": 10,
                    "guard": {"slot": 1, "hot": [["d1", 1]]},
                    "expect": ["d1", [["n1:6379", 3]]],
                },
                {"at_ms": 20, "forget": True},
                {"at_ms": 30, "serve": {"slot": 1}, "expect": False},
                {"at_ms": 40, "heartbeat": {**hb1, "epoch": 9}, "epoch_changed": False},
            ],
        },
    ]
    big = lim["invalidation_bytes_max"]
    inval = '{"v":1,"origin":"o","keys":[{"key":"item:1"},{"key":"item:2"}]}'
    intake = [
        {
            "name": "plain",
            "auth": False,
            "payload": inval,
            "outcome": "applied",
            "drops": ["item:1", "item:2"],
        },
        {
            "name": "signed, no key configured: read as is",
            "auth": False,
            "payload": _sign(inval, key),
            "outcome": "applied",
            "drops": ["item:1", "item:2"],
        },
        {
            "name": "signed with the key",
            "auth": True,
            "payload": _sign(inval, key),
            "outcome": "applied",
            "drops": ["item:1", "item:2"],
        },
        {
            "name": "unsigned with auth on",
            "auth": True,
            "payload": inval,
            "outcome": "unsigned",
            "drops": [],
        },
        {
            "name": "forged signature",
            "auth": True,
            "payload": _sign(inval.replace("item:2", "item:3"), b"another-key-0123456789"),
            "outcome": "unsigned",
            "drops": [],
        },
        {
            "name": "malformed",
            "auth": False,
            "payload": '{"v":1,"keys":"item:1"}',
            "outcome": "bad",
            "drops": [],
        },
        {
            "name": "at the byte cap",
            "auth": False,
            "gen": {"bytes": big},
            "outcome": "applied",
            "drops": ["x"],
        },
        {
            "name": "over the byte cap: dropped whole, nothing flushed",
            "auth": False,
            "gen": {"bytes": big + 1},
            "outcome": "oversized",
            "drops": [],
        },
        {
            "name": "at the key cap",
            "auth": False,
            "gen": {"keys": lim["invalidation_keys_max"]},
            "outcome": "applied",
            "drops_count": lim["invalidation_keys_max"],
        },
        {
            "name": "over the key cap: dropped whole",
            "auth": False,
            "gen": {"keys": lim["invalidation_keys_max"] + 1},
            "outcome": "oversized",
            "drops": [],
        },
    ]
    iv = lim["invalidation_key_interval_ms"]
    ratelimit = [
        {
            "name": "far apart: each applied at once",
            "events": [["inval", 0], ["inval", 100], ["inval", 200]],
            "applied_ms": [0, 100, 200],
        },
        {
            "name": "exactly the interval apart: applied at once",
            "events": [["inval", 0], ["inval", iv], ["inval", 2 * iv]],
            "applied_ms": [0, iv, 2 * iv],
        },
        {
            "name": "early one deferred to the next read after the interval",
            "events": [["inval", 0], ["inval", 3], ["read", 5], ["read", iv + 1]],
            "applied_ms": [0, iv + 1],
        },
        {
            "name": "a flood coalesces into one deferred drop",
            "events": [
                ["inval", 0],
                *[["inval", t] for t in range(1, iv)],
                ["read", iv],
                ["inval", iv + 1],
                ["read", 2 * iv],
            ],
            "applied_ms": [0, iv, 2 * iv],
        },
        {
            "name": "a deferred drop whose time passed applies at the next invalidation",
            "events": [["inval", 0], ["inval", 1], ["inval", 3 * iv]],
            "applied_ms": [0, 3 * iv],
        },
        {
            "name": "never lost: applied at the first read, however late",
            "events": [["inval", 0], ["inval", 1], ["read", 5000]],
            "applied_ms": [0, 5000],
        },
    ]
    return {
        "description": (
            "The app side of the daemon's watch (docs/consistency.md, spec/README.md). decode: a payload of "
            "<prefix>:watch (now_s is the receiver's clock) -> ok with the fields read (slots null: a plain "
            "node, covering every key), or not ok (counted, ignored). leases: steps at at_ms on one monotonic "
            "clock; heartbeat: heard (epoch_changed: the node's epoch differs from the last heard: drop every "
            "copy); guard: a read of a key in slot begins, the hot set holds it for hot [[instance, seq that "
            "made it hot]] -> expect the guard [instance, [[node, epoch], ...] sorted] or null (strict: read "
            "Redis, do not cache); serve: may the copy fetched under the last guard be served (its TTL aside); "
            "forget: the subscription was lost. A heartbeat vouches for watch_lease_ms. intake: one "
            "invalidation received by a cache (auth: configured with the key of vectors/auth.json); gen builds "
            'the payload: bytes N = \'{"v":1,"origin":"\' + \'o\' * fill + \'","keys":[{"key":"x"}]}\' '
            'of exactly N bytes, keys N = {"v":1,"origin":"o","keys":[{"key":"k0"} .. {"key":"k<N-1>"}]}; '
            "outcome applied (drops: the keys dropped), oversized, unsigned or bad (counted; nothing dropped). "
            "ratelimit: one key's invalidations and reads at ms; applied_ms: when its copy drops "
            "(invalidation_key_interval_ms per key; an early one is deferred to the first read at or after "
            "the interval's end or the next invalidation after it, never lost)."
        ),
        "lease_ms": lim["watch_lease_ms"],
        "key_interval_ms": iv,
        "now_s": NOW_S,
        "decode": decode,
        "leases": leases,
        "intake": intake,
        "ratelimit": ratelimit,
    }


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    (SPEC / "vectors" / "watch.json").write_text(render(), "utf-8")
