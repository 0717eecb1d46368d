"""The flash-sale service: the five layers of the template in one small Starlette app.

1. Idempotency-Key at the gateway: ``IdempotencyMiddleware`` (hotkeyd guard, Redis);
2. local cache for read-hot keys: ``GET /product/{id}`` through ``HotCache``;
3. split keys with Lua for the write-hot stock: ``ShardedCounter.take()``;
4. an order state machine with compare-and-set updates (``orders.py``);
5. a UNIQUE key in the database as the backstop (``orders.idem_key``), and the guard's
   ``DurableStore`` in the same database.

Run with ``uvicorn app:make_app --factory`` and FLASH_REDIS_URL / FLASH_DB set
(``run.py`` does all of it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
import redis.asyncio as aioredis
from orders import Orders
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hotkeyd.client import HotCache, ShardedCounter
from hotkeyd.idempotency import (
    AsyncIdempotencyGuard,
    DurableStore,
    HttpPolicy,
    IdempotencyMiddleware,
)
from hotkeyd.protocol.wire import Namespace

NAMESPACE = Namespace("flash")


def stock_counter(r: redis.Redis, product: int) -> ShardedCounter:
    return ShardedCounter(r, f"stock:{product}", shards=8)


def make_app() -> Starlette:
    url = os.environ.get("FLASH_REDIS_URL", "redis://127.0.0.1:6379/0")
    db = os.environ.get("FLASH_DB", "flash.db")
    r = redis.Redis.from_url(url)
    cache = HotCache(redis.Redis.from_url(url), namespace=NAMESPACE)
    orders = Orders(db)
    counters: dict[int, ShardedCounter] = {}

    def product(request: Request) -> Response:
        raw = cache.get(f"product:{int(request.path_params['id'])}")
        if raw is None:
            return JSONResponse({"error": "no such product"}, status_code=404)
        return Response(raw, media_type="application/json")

    def place(
        key: str, user: str, product: int, qty: int, fence: int
    ) -> tuple[int, dict[str, Any]]:
        r.hincrby("flash:executions", key, 1)  # how often the handler really ran, per key
        order_id, created = orders.create(key, user, product, qty, fence)
        if not created:  # a duplicate got past layer 1: layer 5 answers with the order
            r.incr("flash:db_dedup")
            return 200, orders.get(order_id)
        counter = counters.setdefault(product, stock_counter(r, product))
        left = counter.take(user, qty)
        if left is None:
            orders.move(order_id, "NEW", "SOLD_OUT")
            return 200, {**orders.get(order_id), "stock_left": 0}
        orders.move(order_id, "NEW", "RESERVED")
        time.sleep(random.uniform(0.0, 0.01))  # the payment provider
        orders.move(order_id, "RESERVED", "PAID")
        return 201, {**orders.get(order_id), "stock_left": left}

    async def order(request: Request) -> Response:
        body = await request.json()
        lease = request.state.idempotency_lease
        status, obj = await run_in_threadpool(
            place,
            request.headers["idempotency-key"],
            request.headers.get("x-user", "anonymous"),
            int(body["product"]),
            int(body.get("qty", 1)),
            lease.token,
        )
        return JSONResponse(obj, status_code=status)

    def stats(request: Request) -> Response:
        return JSONResponse({**orders.summary(), "cache": dataclasses.asdict(cache.stats())})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(cache.start)
        yield
        cache.close()

    app = Starlette(
        routes=[
            Route("/product/{id:int}", product),
            Route("/order", order, methods=["POST"]),
            Route("/stats", stats),
        ],
        lifespan=lifespan,
    )
    store = DurableStore(
        lambda: sqlite3.connect(db, timeout=30, check_same_thread=False), table="idempotency"
    )
    store.create_table()
    guard = AsyncIdempotencyGuard(
        aioredis.Redis.from_url(url), namespace=NAMESPACE, lease=5, ttl=600, store=store
    )
    policy = HttpPolicy(required={"/order"}, user=lambda req: req.headers.get("x-user", ""))
    app.add_middleware(IdempotencyMiddleware, guard=guard, policy=policy)
    return app


def product_json(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"product {i}", "price_cents": 999 + i}).encode()
