"""Idempotency-Key over real HTTP: uvicorn (ASGI) and waitress (WSGI), httpx as the client."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer, free_port, wait_for_port

APPS = str(Path(__file__).with_name("http_apps.py"))
APP_HEADERS = ("content-type", "content-length", "x-app")


@pytest.fixture(params=["uvicorn", "waitress"])
def base(request: pytest.FixtureRequest, redis_server: RedisServer, ns: Namespace) -> Iterator[str]:
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_server.url, PREFIX=ns.prefix)
    proc = subprocess.Popen([sys.executable, APPS, request.param, str(port)], env=env)
    try:
        wait_for_port(port, timeout=20)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _orders(r: redis.Redis, ns: Namespace) -> int:
    return int(r.get(f"{ns.prefix}:orders") or 0)


def test_double_post_one_order_same_bytes(base: str, r: redis.Redis, ns: Namespace) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        h = {"Idempotency-Key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}
        first = c.post("/order", content=b'{"sku": 1}', headers=h)
        second = c.post("/order", content=b'{"sku": 1}', headers=h)
    assert first.status_code == second.status_code == 201
    assert first.content == second.content  # byte for byte, uuid included
    assert [first.headers.get(n) for n in APP_HEADERS] == [
        second.headers.get(n) for n in APP_HEADERS
    ]
    assert "idempotent-replayed" not in first.headers
    assert second.headers["idempotent-replayed"] == "true"
    assert _orders(r, ns) == 1


def test_409_while_running_then_replay(base: str, r: redis.Redis, ns: Namespace) -> None:
    h = {"Idempotency-Key": '"slow-1"'}  # the draft's quoted form
    out: dict[str, httpx.Response] = {}

    def slow() -> None:
        with httpx.Client(base_url=base, timeout=20) as c:
            out["first"] = c.post("/order?sleep=1.5", content=b"{}", headers=h)

    t = threading.Thread(target=slow)
    t.start()
    with httpx.Client(base_url=base, timeout=10) as c:
        while _orders(r, ns) == 0 and t.is_alive():
            pass  # the first request is inside the handler now
        busy = c.post("/order?sleep=1.5", content=b"{}", headers=h)
        t.join()
        again = c.post("/order?sleep=1.5", content=b"{}", headers=h)
    assert busy.status_code == 409 and int(busy.headers["retry-after"]) >= 1
    assert again.status_code == 201 and again.content == out["first"].content
    assert _orders(r, ns) == 1


def test_422_on_reuse_with_another_body(base: str, r: redis.Redis, ns: Namespace) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        h = {"Idempotency-Key": "k-422"}
        assert c.post("/order", content=b'{"qty": 1}', headers=h).status_code == 201
        bad = c.post("/order", content=b'{"qty": 2}', headers=h)
        assert bad.status_code == 422 and "different request" in bad.json()["error"]
        assert c.post("/order?coupon=1", content=b'{"qty": 1}', headers=h).status_code == 422
        # another user may use the same key for their own request
        other = c.post("/order", content=b'{"qty": 2}', headers={**h, "X-User": "bob"})
        assert other.status_code == 201
    assert _orders(r, ns) == 2


def test_400_and_413(base: str, r: redis.Redis, ns: Namespace) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        missing = c.post("/order", content=b"{}")
        assert missing.status_code == 400 and "Idempotency-Key" in missing.json()["error"]
        assert (
            c.post("/order", content=b"{}", headers={"Idempotency-Key": "x" * 256}).status_code
            == 400
        )
        assert c.post("/order", content=b"{}", headers={"Idempotency-Key": ""}).status_code == 400
        big = c.post("/order", content=b"{}" + b" " * 5000, headers={"Idempotency-Key": "big"})
        assert big.status_code == 413
        # a route that does not require a key runs every time without one
        assert c.post("/note", content=b"{}").status_code == 201
        assert c.post("/note", content=b"{}").status_code == 201
    assert _orders(r, ns) == 2


def test_503_when_redis_is_down(base: str, redis_server: RedisServer) -> None:
    redis_server.stop()
    with httpx.Client(base_url=base, timeout=10) as c:
        resp = c.post("/order", content=b"{}", headers={"Idempotency-Key": "down"})
    assert resp.status_code == 503 and "retry-after" in resp.headers


def test_5xx_is_not_stored_the_retry_runs(base: str, r: redis.Redis, ns: Namespace) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        h = {"Idempotency-Key": "flaky-1"}
        assert c.post("/order?flaky=1", content=b"{}", headers=h).status_code == 500
        ok = c.post("/order?flaky=1", content=b"{}", headers=h)
        assert ok.status_code == 201 and "idempotent-replayed" not in ok.headers
        assert c.post("/order?flaky=1", content=b"{}", headers=h).content == ok.content
    assert _orders(r, ns) == 1


def test_chunked_body_is_read_and_fingerprinted(base: str, r: redis.Redis, ns: Namespace) -> None:
    def chunks(payload: bytes) -> Iterator[bytes]:
        yield payload[:3]
        yield payload[3:]

    with httpx.Client(base_url=base, timeout=10) as c:
        h = {"Idempotency-Key": "chunked-1"}
        first = c.post("/order", content=chunks(b'{"sku": 7}'), headers=h)
        assert first.status_code == 201 and first.json()["request"] == {"sku": 7}
        again = c.post("/order", content=chunks(b'{"sku": 7}'), headers=h)
        assert again.content == first.content
        assert c.post("/order", content=chunks(b'{"sku": 8}'), headers=h).status_code == 422
    assert _orders(r, ns) == 1


def test_streamed_response_is_stored_whole_and_replayed(
    base: str, r: redis.Redis, ns: Namespace
) -> None:
    """A handler that streams its answer: the client and the replay get every piece."""
    with httpx.Client(base_url=base, timeout=10) as c:
        h = {"Idempotency-Key": "stream-1"}
        first = c.post("/stream", content=b"{}", headers=h)
        again = c.post("/stream", content=b"{}", headers=h)
    assert first.status_code == 201 and first.content.endswith(b"end\n"), first.content
    assert first.content.startswith(b"order 1\n")
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    assert _orders(r, ns) == 1


def test_a_client_that_hangs_up_gets_the_whole_response_on_retry(
    base: str, r: redis.Redis, ns: Namespace
) -> None:
    """The first attempt times out while the handler streams: the operation still finishes
    and is recorded whole, so the retry replays every piece (never a cut-off body)."""
    h = {"Idempotency-Key": "hang-up-1"}
    with httpx.Client(base_url=base, timeout=0.05) as c, pytest.raises(httpx.TimeoutException):
        c.post("/stream", content=b"{}", headers=h)
    with httpx.Client(base_url=base, timeout=10) as c:
        deadline = time.monotonic() + 10
        while (again := c.post("/stream", content=b"{}", headers=h)).status_code == 409:
            assert time.monotonic() < deadline, "the first attempt never finished"
            time.sleep(0.05)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.content.startswith(b"order 1\n") and again.content.endswith(b"end\n")
    assert _orders(r, ns) == 1
