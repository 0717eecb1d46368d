"""The same tiny order API as a Starlette (ASGI) and a Flask (WSGI) app, for the HTTP tests.

    python http_apps.py uvicorn PORT     # real uvicorn
    python http_apps.py waitress PORT    # real waitress

Reads REDIS_URL and PREFIX from the environment. ``POST /order`` counts an order in Redis
and answers 201 with a fresh uuid (so a second run would give other bytes); ``?sleep=S``
makes it slow after counting; ``?flaky=1`` answers 500 on the first call. ``/order`` requires an Idempotency-Key, ``/note`` does not. ``POST /stream`` counts an order too
and streams its answer in pieces (StreamingResponse, a generator in Flask).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

import redis

from hotkeyd.idempotency.http import HttpPolicy
from hotkeyd.protocol.wire import Namespace

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("PREFIX", "hk-http")
POLICY = HttpPolicy(
    required={"/order"}, max_body=4096, user=lambda req: req.headers.get("x-user", "")
)


def _flaky() -> bool:
    """True (answer 500) for the first call: a failure worth retrying."""
    return redis.Redis.from_url(URL).incr(f"{PREFIX}:flaky") == 1


def _order(body: bytes) -> tuple[int, dict[str, Any]]:
    n = redis.Redis.from_url(URL).incr(f"{PREFIX}:orders")
    return 201, {"order": n, "id": uuid.uuid4().hex, "request": json.loads(body or b"{}")}


def _pieces(obj: dict[str, Any]) -> list[bytes]:
    return [f"order {obj['order']}\n".encode(), f"id {obj['id']}\n".encode(), b"end\n"]


def make_starlette() -> Any:
    import asyncio

    import redis.asyncio as aioredis
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    from hotkeyd.idempotency.aioguard import AsyncIdempotencyGuard
    from hotkeyd.idempotency.asgi import IdempotencyMiddleware

    async def order(request: Request) -> JSONResponse:
        if request.query_params.get("flaky") and _flaky():
            return JSONResponse({"error": "try again"}, status_code=500)
        status, obj = _order(await request.body())
        await asyncio.sleep(float(request.query_params.get("sleep", 0)))
        return JSONResponse(obj, status_code=status, headers={"x-app": "starlette"})

    async def stream(request: Request) -> StreamingResponse:
        _, obj = _order(await request.body())

        async def pieces() -> Any:
            for piece in _pieces(obj):
                await asyncio.sleep(0.05)
                yield piece

        return StreamingResponse(pieces(), status_code=201, media_type="text/plain")

    app = Starlette(
        routes=[
            Route("/order", order, methods=["POST"]),
            Route("/note", order, methods=["POST"]),
            Route("/stream", stream, methods=["POST"]),
        ]
    )
    guard = AsyncIdempotencyGuard(
        aioredis.Redis.from_url(URL), namespace=Namespace(PREFIX), lease=10
    )
    app.add_middleware(IdempotencyMiddleware, guard=guard, policy=POLICY)
    return app


def make_flask() -> Any:
    from flask import Flask, request

    from hotkeyd.idempotency import IdempotencyGuard
    from hotkeyd.idempotency.wsgi import IdempotencyWSGIMiddleware

    app = Flask(__name__)

    @app.post("/order")
    @app.post("/note")
    def order() -> Any:
        if request.args.get("flaky") and _flaky():
            return app.response_class('{"error": "try again"}', 500)
        status, obj = _order(request.get_data())
        time.sleep(float(request.args.get("sleep", 0)))
        return app.response_class(
            json.dumps(obj), status, {"content-type": "application/json", "x-app": "flask"}
        )

    @app.post("/stream")
    def stream() -> Any:
        _, obj = _order(request.get_data())

        def pieces() -> Any:
            for piece in _pieces(obj):
                time.sleep(0.05)
                yield piece

        return app.response_class(pieces(), 201, {"content-type": "text/plain"})

    guard = IdempotencyGuard(redis.Redis.from_url(URL), namespace=Namespace(PREFIX), lease=10)
    app.wsgi_app = IdempotencyWSGIMiddleware(app.wsgi_app, guard, POLICY)  # type: ignore[method-assign]
    return app


if __name__ == "__main__":
    server, port = sys.argv[1], int(sys.argv[2])
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(make_starlette(), host="127.0.0.1", port=port, log_level="warning")
    else:
        import waitress

        waitress.serve(make_flask(), host="127.0.0.1", port=port, threads=8, _quiet=True)
