"""Who may replay whose response: HttpPolicy's per-caller scope (ASGI and WSGI in process).

The middleware runs through its own ASGI/WSGI entry point (httpx's transports) against a
real Redis; the HTTP servers themselves are covered by test_http.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from hotkeyd.idempotency import (
    AsyncIdempotencyGuard,
    HttpPolicy,
    IdempotencyGuard,
    IdempotencyMiddleware,
    IdempotencyWSGIMiddleware,
)
from hotkeyd.idempotency.http import Request, Response, encode_response
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

ALICE = {"Authorization": "Bearer alice-token", "Idempotency-Key": "k-1"}
BOB = {"Authorization": "Bearer bob-token", "Idempotency-Key": "k-1"}


class Apps:
    """A counting ASGI app and WSGI app: each run answers 201 with its run number."""

    def __init__(self) -> None:
        self.runs = itertools.count(1)
        self.count = 0

    def _next(self) -> bytes:
        self.count = next(self.runs)
        return f'{{"run": {self.count}}}'.encode()

    async def asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await receive()
        body = self._next()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": body})

    def wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("201 Created", [("content-type", "application/json")])
        return [self._next()]


@pytest.fixture(params=["asgi", "wsgi"])
def post(
    request: pytest.FixtureRequest, redis_server: RedisServer, r: redis.Redis, ns: Namespace
) -> Callable[..., Any]:
    """post(policy, headers) -> (status, body, replayed); ``post.apps.count`` = runs."""
    apps = Apps()

    def run(policy: HttpPolicy, headers: dict[str, str], body: bytes = b"{}") -> Any:
        if request.param == "wsgi":
            app = IdempotencyWSGIMiddleware(apps.wsgi, IdempotencyGuard(r, namespace=ns), policy)
            with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t") as c:
                resp = c.post("/order", content=body, headers=headers)
        else:

            async def go() -> httpx.Response:
                client = aioredis.Redis.from_url(redis_server.url)
                guard = AsyncIdempotencyGuard(client, namespace=ns)
                mw = IdempotencyMiddleware(apps.asgi, guard, policy)
                transport = httpx.ASGITransport(app=mw)
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                    out = await c.post("/order", content=body, headers=headers)
                await client.aclose()
                return out

            resp = asyncio.run(go())
        return resp.status_code, resp.content, resp.headers.get("idempotent-replayed") == "true"

    run.apps = apps  # type: ignore[attr-defined]
    run.kind = request.param  # type: ignore[attr-defined]
    return run


def test_default_policy_scopes_keys_by_caller(post: Any) -> None:
    """Bob reusing Alice's key runs his own request; he never sees Alice's response."""
    policy = HttpPolicy()
    assert post(policy, ALICE) == (201, b'{"run": 1}', False)
    assert post(policy, BOB) == (201, b'{"run": 2}', False)
    assert post(policy, ALICE) == (201, b'{"run": 1}', True)
    assert post(policy, BOB) == (201, b'{"run": 2}', True)
    assert post.apps.count == 2


def test_a_scope_function_names_the_caller(post: Any) -> None:
    policy = HttpPolicy(user=lambda req: req.headers.get("x-tenant", ""))
    assert post(policy, {**ALICE, "X-Tenant": "acme"})[1] == b'{"run": 1}'
    # another token of the same tenant shares the key space, as the policy says
    assert post(policy, {**BOB, "X-Tenant": "acme"}) == (201, b'{"run": 1}', True)
    assert post(policy, {**BOB, "X-Tenant": "globex"})[1] == b'{"run": 2}'


def test_shared_keys_are_deliberate(post: Any) -> None:
    policy = HttpPolicy(shared=True)
    assert post(policy, ALICE)[1] == b'{"run": 1}'
    assert post(policy, BOB) == (201, b'{"run": 1}', True)


def test_records_of_the_unscoped_default_replay_in_the_transition_window(
    post: Any, r: redis.Redis, ns: Namespace
) -> None:
    """A record written by the old default (no caller scope) still replays to its retry."""
    policy = HttpPolicy()
    old = IdempotencyGuard(r, namespace=ns)
    b = old.begin("k-1", policy.fingerprint_of(Request("POST", "/order", {}), b"{}"))
    assert b.lease is not None
    old.complete(b.lease, encode_response(Response(201, [], b'{"run": 0}')))
    assert post(policy, ALICE) == (201, b'{"run": 0}', True)
    assert post(policy, ALICE, b'{"other": 1}')[0] == 201  # not the old record's request
    assert post.apps.count == 1
    # once the window is closed, the old record is not looked at
    closed = HttpPolicy(legacy_unscoped=False)
    assert post(closed, BOB)[1] == b'{"run": 2}'


def test_gateway_dedup_of_requests_without_a_key(post: Any) -> None:
    """gateway=True: the same request of the same caller within gateway_ttl runs once."""
    import time

    policy = HttpPolicy(gateway=True, gateway_ttl=0.5)
    auth = {"Authorization": ALICE["Authorization"]}
    assert post(policy, auth) == (201, b'{"run": 1}', False)
    assert post(policy, auth) == (201, b'{"run": 1}', True)  # a double click
    assert post(policy, auth, b'{"sku": 2}')[1] == b'{"run": 2}'  # another request
    assert post(policy, {"Authorization": BOB["Authorization"]})[1] == b'{"run": 3}'
    time.sleep(0.7)  # past the short TTL: identical requests later are legitimate
    assert post(policy, auth) == (201, b'{"run": 4}', False)
    assert post(HttpPolicy(), auth)[1] == b'{"run": 5}'  # off by default
    assert post(HttpPolicy(), auth)[1] == b'{"run": 6}'


def test_two_idempotency_key_headers_are_400(post: Any) -> None:
    """Two field lines (or a list) are ambiguous: the last one must not silently win."""
    policy = HttpPolicy()
    if post.kind == "asgi":  # httpx's WSGI transport keeps one line (test_http.py: waitress)
        two = httpx.Headers([("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
        status, body, _ = post(policy, two)
        assert status == 400 and b"one Idempotency-Key" in body
    assert post(policy, {"Idempotency-Key": '"a", "b"'})[0] == 400
    assert post(policy, {"Idempotency-Key": '"a,b"'})[0] == 201  # a comma inside the string
    assert post.apps.count == 1


def test_canonical_json_fingerprint_and_field_selector(post: Any) -> None:
    assert post(HttpPolicy(), ALICE, b'{"a": 1, "b": 2}')[0] == 201
    assert post(HttpPolicy(), ALICE, b'{"a":1,"b":2}')[0] == 422  # raw bytes by default
    canon = HttpPolicy(canonical_json=True)
    assert post(canon, BOB, b'{"a": 1, "b": 2}')[0] == 201
    assert post(canon, BOB, b'{ "b": 2,\n "a": 1 }') == (201, b'{"run": 2}', True)
    assert post(canon, BOB, b'{"a": 1, "b": 3}')[0] == 422
    only_sku = HttpPolicy(canonical_json=True, fields=("sku",))
    carol = {"Authorization": "Bearer carol", "Idempotency-Key": "k-1"}
    assert post(only_sku, carol, b'{"sku": 7, "note": "x"}')[0] == 201
    assert post(only_sku, carol, b'{"note": "y", "sku": 7}')[2] is True  # note ignored
    assert post(only_sku, carol, b'{"sku": 8}')[0] == 422
    assert post(only_sku, carol, b"not json")[0] == 422  # raw bytes when it is not JSON
