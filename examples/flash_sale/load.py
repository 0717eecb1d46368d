"""The flash-sale load: hot product reads, and orders that are all retried.

Every order is sent until it gets a final answer (timeouts and 409 are retried with the
same Idempotency-Key), then sent once more: a client that never saw the answer. Some
first attempts get a client timeout far shorter than the server's work (injected
timeouts), so the server finishes an order nobody is waiting for and the retry must get
that result, not a second order.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

# Seconds a buyer keeps retrying one order (409 while the first attempt runs) before it
# counts an error: longer than the app's 5 s lease, after which a retry takes the order
# over even if the first attempt's handler died. A try count would depend on how fast a
# (loaded) machine answers the 409s.
GIVE_UP = 30.0


@dataclass
class LoadStats:
    """What the clients saw."""

    product_reads: int = 0
    hot_read_times: list[float] = field(default_factory=list)  # monotonic, GET /product/1
    read_latency: list[float] = field(default_factory=list)
    orders: int = 0  # distinct Idempotency-Keys
    attempts: int = 0
    retries: int = 0  # attempts beyond the first, per key
    injected_timeouts: int = 0
    conflicts_409: int = 0
    replays: int = 0  # responses with Idempotent-Replayed: true
    mismatched_replays: int = 0  # a retry whose bytes differ from the first answer
    order_latency: list[float] = field(default_factory=list)
    by_state: dict[str, int] = field(default_factory=dict)
    errors: int = 0  # read_errors + orders_abandoned
    read_errors: dict[int, int] = field(default_factory=dict)  # status code -> count
    orders_abandoned: int = 0  # no final answer within GIVE_UP seconds
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _reader(base: str, deadline: float, st: LoadStats, hot_share: float) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        while time.monotonic() < deadline:
            pid = 1 if random.random() < hot_share else random.randint(2, 20)
            t0 = time.monotonic()
            resp = c.get(f"/product/{pid}")
            dt = time.monotonic() - t0
            with st.lock:
                st.product_reads += 1
                if pid == 1:
                    st.hot_read_times.append(t0)
                st.read_latency.append(dt)
                if resp.status_code != 200:
                    st.errors += 1
                    st.read_errors[resp.status_code] = st.read_errors.get(resp.status_code, 0) + 1


def _buyer(base: str, deadline: float, st: LoadStats, timeout_rate: float, n: int) -> None:
    user = f"user-{n}"
    with httpx.Client(base_url=base, timeout=10) as c:
        while time.monotonic() < deadline:
            key = str(uuid.uuid4())
            body = json.dumps({"product": 1, "qty": 1})
            headers = {"Idempotency-Key": key, "X-User": user, "Content-Type": "application/json"}
            first: httpx.Response | None = None
            tries = 0
            give_up = time.monotonic() + GIVE_UP
            while first is None and time.monotonic() < give_up:
                tries += 1
                inject = tries == 1 and random.random() < timeout_rate
                t0 = time.perf_counter()
                try:
                    resp = c.post(
                        "/order", content=body, headers=headers, timeout=0.001 if inject else 10
                    )
                except httpx.TimeoutException:
                    with st.lock:
                        st.injected_timeouts += 1
                    continue
                dt = time.perf_counter() - t0
                if resp.status_code == 409:  # still running: retry after a moment
                    with st.lock:
                        st.conflicts_409 += 1
                    time.sleep(0.005)
                    continue
                first = resp
                with st.lock:
                    st.order_latency.append(dt)
                    st.replays += resp.headers.get("idempotent-replayed") == "true"
            if first is None:
                with st.lock:
                    st.errors += 1
                    st.orders_abandoned += 1
                continue
            again = c.post("/order", content=body, headers=headers)  # the lost-answer retry
            with st.lock:
                st.orders += 1
                st.attempts += tries + 1
                st.retries += tries
                st.replays += again.headers.get("idempotent-replayed") == "true"
                same = again.status_code == first.status_code and again.content == first.content
                st.mismatched_replays += not same
                state = first.json().get("state", str(first.status_code))
                st.by_state[state] = st.by_state.get(state, 0) + 1


def run(
    base: str,
    seconds: float,
    *,
    buyers: int = 8,
    readers: int = 4,
    timeout_rate: float = 0.25,
    hot_share: float = 0.9,
) -> LoadStats:
    st = LoadStats()
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_reader, args=(base, deadline, st, hot_share))
        for _ in range(readers)
    ]
    threads += [
        threading.Thread(target=_buyer, args=(base, deadline, st, timeout_rate, n))
        for n in range(buyers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return st
