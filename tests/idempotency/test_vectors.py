"""spec/vectors/idempotency.json through the Python guard, against a real redis-server.

The same file pins the Java, Go and Node guards: a language's guard is compatible when it
passes every case here (same digests, same records, same transitions).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hotkeyd.idempotency import IdempotencyGuard, IdempotencyNames, Lease, Outcome
from hotkeyd.idempotency.errors import IdempotencyKeyError, IdempotencyUnavailable, LeaseLostError
from hotkeyd.idempotency.http import HttpPolicy, Request, error_response, refusal
from hotkeyd.idempotency.keys import fingerprint, record_digest
from hotkeyd.idempotency.outcome import Begin
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer, free_port

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "spec" / "vectors" / "idempotency.json").read_text()
)
DEFAULTS = VECTORS["defaults"]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as rs:
        yield rs


@pytest.mark.parametrize("v", VECTORS["fingerprints"], ids=lambda v: repr(v["parts"]))
def test_fingerprint_digests(v: dict[str, Any]) -> None:
    assert fingerprint(*v["parts"]) == v["digest"]


@pytest.mark.parametrize("v", VECTORS["records"], ids=lambda v: v["key"][:20])
def test_record_names(v: dict[str, Any]) -> None:
    names = IdempotencyNames(v["prefix"])
    assert names.record(record_digest(v["scope"], v["key"])) == v["record"]


HTTP = VECTORS["http"]


@pytest.mark.parametrize("v", HTTP["scopes"], ids=lambda v: v["scoped_key"][:12])
def test_http_caller_scopes(v: dict[str, Any]) -> None:
    headers = {"idempotency-key": v["key"], "authorization": "Bearer someone-else"}
    if "authorization" in v:
        headers["authorization"] = v["authorization"]
    elif "user" not in v:
        del headers["authorization"]
    policy = HttpPolicy() if "user" not in v else HttpPolicy(user=lambda _r: v["user"])
    scoped = policy.key_of(Request("POST", "/order", headers))
    assert scoped is not None and scoped == v["scoped_key"]
    assert IdempotencyNames().record(record_digest("", scoped)) == v["record"]


@pytest.mark.parametrize("v", HTTP["problems"], ids=lambda v: str(v["status"]))
def test_http_problems(v: dict[str, Any]) -> None:
    r = error_response(v["status"], v["detail"])
    assert dict(r.headers)["content-type"] == HTTP["content_type"]
    want = {"type": HTTP["problem_type"], "title": v["title"], "status": v["status"]}
    assert json.loads(r.body) == {**want, "detail": v["detail"]}


@pytest.mark.parametrize("v", HTTP["retry_after"], ids=lambda v: str(v["median_ms"]))
def test_http_retry_after(v: dict[str, Any]) -> None:
    busy = Begin(Outcome.IN_PROGRESS, retry_after=v["lease_left_ms"] / 1000)
    median = None if v["median_ms"] is None else v["median_ms"] / 1000
    assert dict(refusal(busy, median).headers)["retry-after"] == v["retry_after"]


def _guard(client: redis.Redis, case: dict[str, Any], scope: str) -> IdempotencyGuard:
    return IdempotencyGuard(
        client,
        lease=case["lease_ms"] / 1000,
        ttl=case["ttl_ms"] / 1000,
        namespace=Namespace(prefix=case["prefix"]),
        scope=scope,
        audit_maxlen=case["audit_maxlen"],
        max_key_length=case["max_key_length"],
        on_error=case["on_error"],
    )


def _fenced(g: IdempotencyGuard, op: str, lease: Lease, result: bytes) -> str:
    try:
        if op == "complete":
            g.complete(lease, result)
        elif op == "fail":
            g.fail(lease, result)
        elif op == "release":
            g.release(lease)
        else:
            g.extend(lease)
    except LeaseLostError:
        return "lease_lost"
    except IdempotencyUnavailable:
        return "unavailable"
    return "ok"


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_case(case: dict[str, Any], server: RedisServer) -> None:
    case = {**DEFAULTS, **case}
    port = server.port if case["redis"] == "up" else free_port()
    client: Any = redis.Redis(
        port=port, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    if case["redis"] == "up":
        client.flushall()
    guards: dict[str, IdempotencyGuard] = {}
    leases: dict[str, Lease] = {}

    def guard(step: dict[str, Any]) -> IdempotencyGuard:
        scope = step.get("scope", case["scope"])
        if scope not in guards:
            guards[scope] = _guard(client, case, scope)
        return guards[scope]

    for i, step in enumerate(case["steps"]):
        where = f"step {i} {step}"
        op = step["op"]
        want = step.get("expect")
        if op == "sleep":
            time.sleep(step["ms"] / 1000)
        elif op == "begin":
            try:
                b = guard(step).begin(step["key"], step["fingerprint"])
            except IdempotencyKeyError:
                assert want == {"error": "key"}, where
                continue
            except IdempotencyUnavailable:
                assert want == {"error": "unavailable"}, where
                continue
            assert "error" not in want, where
            assert b.outcome is Outcome(want["outcome"]), where
            if "takeover" in want:
                assert b.takeover is want["takeover"], where
            if "guarded" in want:
                assert b.lease is not None and b.lease.guarded is want["guarded"], where
            if "token_above" in want:
                assert b.lease is not None and b.lease.token > leases[want["token_above"]].token
            if "retry_after_ms_max" in want:
                assert 0 < b.retry_after * 1000 <= want["retry_after_ms_max"], where
            if "result" in want:
                assert b.result == want["result"].encode(), where
            if "failed" in want:
                assert b.failed is want["failed"], where
            if "as" in step and b.lease is not None:
                leases[step["as"]] = b.lease
        elif op in ("complete", "fail", "release", "extend"):
            result = step.get("result", "").encode()
            assert _fenced(guard(step), op, leases[step["lease"]], result) == want, where
        elif op == "record":
            name = IdempotencyNames(case["prefix"]).record(
                record_digest(step.get("scope", case["scope"]), step["key"])
            )
            rec = {k.decode(): v.decode() for k, v in client.hgetall(name).items()}
            if want.get("absent"):
                assert rec == {}, where
                continue
            assert rec["st"] == want["st"], where
            if "res" in want:
                assert rec["res"] == want["res"], where
            if "fingerprint" in want:
                assert rec["fp"] == fingerprint(want["fingerprint"]), where
            if "token_of" in want:
                assert int(rec["tok"]) == leases[want["token_of"]].token, where
        elif op == "audit":
            events = client.xrange(f"{case['prefix']}:idem-audit")
            assert [e[b"ev"].decode() for _id, e in events] == want, where
        else:
            raise AssertionError(f"unknown op {op!r}")
    client.close()
