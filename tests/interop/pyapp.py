"""The Python app of the cross-language end-to-end test; the twin of Java's InteropApp.

Reads one key through :class:`hotkeyd.client.HotCache` at a paced rate and speaks JSON
lines: ``ready``, ``hot``/``cool`` (the key in its hot set), ``progress`` every 0.2 s,
``value`` when the value read changes, ``wrote`` after a ``set <value>`` command read
from stdin, ``done``. Nothing here talks to the daemon: the SDK does.

    python tests/interop/pyapp.py <redis port> <namespace> <key> <reads/s> <seconds>
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import redis

from hotkeyd.client import HotCache
from hotkeyd.wire import HotEntry, Namespace

_out = threading.Lock()


def emit(**obj: Any) -> None:
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def main() -> None:
    port, prefix, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    rate, seconds = float(sys.argv[4]), float(sys.argv[5])
    kb = key.encode()
    client = redis.Redis(port=port)
    cache = HotCache(client, namespace=Namespace(prefix))

    def on_hot(e: HotEntry) -> None:
        if e.key == kb:
            emit(ev="hot", t=int(time.time() * 1000))

    def on_cool(k: bytes) -> None:
        if k == kb:
            emit(ev="cool", t=int(time.time() * 1000))

    cache.hotset.add_listener(on_hot=on_hot, on_cool=on_cool)
    cache.start()
    emit(ev="ready")

    def commands() -> None:
        for line in sys.stdin:
            if line.startswith("set "):
                v = line[4:].rstrip("\n")
                t = int(time.time() * 1000)
                cache.set(key, v)
                emit(ev="wrote", v=v, t=t)

    threading.Thread(target=commands, daemon=True).start()
    step = 0.005
    per = max(1, round(rate * step))
    reads = 0
    last: Any = object()
    t = time.monotonic()
    next_progress = t
    for _ in range(int(seconds / step)):
        for _ in range(per):
            raw = cache.get(key)
            v = None if raw is None else raw.decode()
            if v != last:
                last = v
                emit(ev="value", v=v, t=int(time.time() * 1000))
        reads += per
        now = time.monotonic()
        if now >= next_progress:
            next_progress = now + 0.2
            st = cache.stats
            emit(
                ev="progress", reads=reads, local=st.hits + st.stale_hits, t=int(time.time() * 1000)
            )
        t += step
        time.sleep(max(0.0, t - time.monotonic()))
    emit(ev="done", reads=reads)
    cache.close()
    client.close()


if __name__ == "__main__":
    main()
