"""The Python side of the cross-language app protocol (see ``apps.py``).

Reads one key through ``HotCache`` at a steady rate, as a service would; writes through
the cache when told on stdin. The Go, Node and Java read apps speak the same protocol.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

import redis
import redis.cluster

from hotkeyd.client import HotCache
from hotkeyd.protocol.wire import Namespace

_out = threading.Lock()


def emit(**obj: Any) -> None:
    obj["t"] = time.time() * 1000.0  # when it happened, in this host's wall clock (ms)
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="")
    p.add_argument("--cluster", default="")
    p.add_argument("--key", default="product:1")
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--cold-keys", type=int, default=0)
    p.add_argument("--namespace", default="hotkeyd")
    p.add_argument("--seconds", type=float, default=3600)
    p.add_argument("--sharded", action="store_true", help="sharded pub/sub (SSUBSCRIBE)")
    a = p.parse_args()
    client: Any
    if a.cluster:
        host, port = a.cluster.split(",")[0].split(":")
        client = redis.cluster.RedisCluster(host=host, port=int(port))
    else:
        client = redis.Redis.from_url(a.url)
    cache = HotCache(client, namespace=Namespace(a.namespace, sharded=a.sharded)).start()
    emit(event="ready", lang="python")
    stop = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            line = line.rstrip("\n")
            if line.startswith("set "):
                cache.set(a.key, line[4:])
                emit(event="wrote", value=line[4:])
            elif line == "stop":
                break
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    interval = 1.0 / a.rate
    end = time.monotonic() + a.seconds
    nxt = time.monotonic()
    last_stats = time.monotonic()
    reads = errors = i = 0
    last: Any = object()
    prev_t = 0.0  # when the previous read (still the old value) returned (unix ms)
    while not stop.is_set() and time.monotonic() < end:
        try:
            v = cache.get(a.key)
            now_t = time.time() * 1000.0
            if v != last:
                last = v
                emit(event="value", value=None if v is None else v.decode(), prev_t=prev_t)
            prev_t = now_t
        except redis.RedisError:
            errors += 1
        reads += 1
        if a.cold_keys and i % 20 == 0:
            cache.get(f"cold:{(i // 20) % a.cold_keys}")
        i += 1
        now = time.monotonic()
        if now - last_stats >= 1.0:
            last_stats = now
            st = cache.stats
            emit(event="stats", reads=reads, errors=errors, hot=a.key.encode() in cache.hotset,
                 local_hits=st.hits + st.stale_hits)  # fmt: skip
        nxt += interval
        d = nxt - time.monotonic()
        if d > 0.001:
            time.sleep(d)
        elif d < -1.0:
            nxt = time.monotonic()
    st = cache.stats
    emit(event="done", reads=reads, errors=errors, local_hits=st.hits + st.stale_hits)
    cache.close()


if __name__ == "__main__":
    main()
