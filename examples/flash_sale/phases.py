"""The recipe's targeted phases, after the load: what a steady load cannot provoke.

- slow handler: an order whose payment takes 2.5 leases, while its client retries: the
  middleware keeps the lease alive, so the handler runs once and every retry gets 409
  until the one answer is replayed;
- frozen holder: the first attempt is frozen (SIGSTOP of its whole server, keep-alive
  included) past its lease with the order RESERVED; the retry, on a second server,
  takes over, pays it, and answers PAID (never a RESERVED stored for ever); the thawed
  first attempt's updates are refused by the fence column;
- key reuse: two users send the same Idempotency-Key: each gets an order of their own;
- GET /stats answers 200.

Each phase returns a dict of what it saw and a list of the invariants it broke.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from typing import Any

import httpx
import redis
from orders import Orders

PRODUCT = 2  # the phases' own stock (product 1 is sold out by the load)
BODY = json.dumps({"product": PRODUCT, "qty": 1})


def _post(c: httpx.Client, user: str, key: str, delay: float = 0.0) -> httpx.Response:
    headers = {"Idempotency-Key": key, "X-User": user, "Content-Type": "application/json"}
    if delay:
        headers["X-Payment-Delay"] = str(delay)
    return c.post("/order", content=BODY, headers=headers)


def _until_final(c: httpx.Client, user: str, key: str, limit: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + limit
    while (resp := _post(c, user, key)).status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.05)
    return resp


def slow_handler(base: str, r: redis.Redis, lease: float) -> tuple[dict[str, Any], list[str]]:
    key, user = str(uuid.uuid4()), "slow-user"
    out: dict[str, httpx.Response] = {}

    def first() -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            out["first"] = _post(c, user, key, delay=2.5 * lease)

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.2)
    with httpx.Client(base_url=base, timeout=30) as c:
        retry = _until_final(c, user, key)
    t.join()
    runs = int(r.hget("flash:executions", f"{user}:{key}") or 0)
    seen = {"runs": runs, "state": retry.json().get("state"), "status": retry.status_code}
    bad = []
    if runs != 1:
        bad.append(f"slow handler ran {runs} times")
    if retry.content != out["first"].content or seen["state"] != "PAID":
        bad.append(f"slow handler's retry got {retry.status_code} {retry.content!r}")
    return seen, bad


def frozen_holder(
    base: str, other: str, pid: int, r: redis.Redis, db: str, lease: float
) -> tuple[dict[str, Any], list[str]]:
    key, user = str(uuid.uuid4()), "frozen-user"
    orders = Orders(db)

    def first() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            _post(c, user, key, delay=1.0)

    t = threading.Thread(target=first)
    t.start()
    deadline = time.monotonic() + 10
    while orders.state_of(user, key) != "RESERVED" and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(pid, signal.SIGSTOP)  # a frozen VM: handler and keep-alive both stop
    try:
        time.sleep(lease * 1.5)
        with httpx.Client(base_url=other, timeout=30) as c:
            retry = _until_final(c, user, key)
    finally:
        os.kill(pid, signal.SIGCONT)
    t.join()
    time.sleep(0.2)
    with httpx.Client(base_url=other, timeout=30) as c:
        replay = _post(c, user, key)
    db_state = orders.state_of(user, key)
    seen = {
        "retry_state": retry.json().get("state"),
        "replay_state": replay.json().get("state"),
        "db_state": db_state,
        "stale_holders": int(r.get("flash:stale_holders") or 0),
    }
    bad = []
    if not seen["retry_state"] == seen["replay_state"] == db_state == "PAID":
        bad.append(f"frozen holder: retry/replay/database say {seen}")
    if seen["stale_holders"] < 1:
        bad.append("frozen holder: the thawed first attempt was not fenced off")
    return seen, bad


def key_reuse(base: str) -> tuple[dict[str, Any], list[str]]:
    key = str(uuid.uuid4())
    with httpx.Client(base_url=base, timeout=30) as c:
        alice, bob = _post(c, "alice", key), _post(c, "bob", key)
    a, b = alice.json(), bob.json()
    seen = {"alice": [alice.status_code, a.get("user")], "bob": [bob.status_code, b.get("user")]}
    bad = []
    if alice.status_code != 201 or bob.status_code != 201 or a.get("id") == b.get("id"):
        bad.append(f"key reuse: {seen}")
    if a.get("user") != "alice" or b.get("user") != "bob":
        bad.append(f"key reuse: an order answered to the wrong user: {seen}")
    return seen, bad


def stats(base: str) -> tuple[dict[str, Any], list[str]]:
    resp = httpx.get(f"{base}/stats", timeout=30)
    return {"status": resp.status_code}, ([] if resp.status_code == 200 else ["GET /stats"])
