"""The Python stale-read app: reads hot keys through ``HotCache`` as a service would.

Protocol (the same for the Go, Java and Node readers next to this file):

- arguments: ``--url redis://...`` or ``--cluster host:port,...``; ``--keys k1,k2,...``
  (read round-robin); ``--flash KEY,T0,T1`` (also read KEY while the shared monotonic
  clock is within [T0, T1) ns); ``--rate`` reads/s; ``--cold-keys N`` (one cold read per
  20); ``--namespace``; ``--mode available|strict``; ``--log FILE``.
- the log gets one line per read of a hot or flash key:
  ``<key index> <generation> <t_start ns> <t_end ns> <1 if served locally else 0>``,
  times in CLOCK_MONOTONIC (shared by every process on the host); generation -1 means
  the key was absent, -2 a value that is not ``g:<n>:...``. Index len(keys) is the flash key.
- stdout: ``{"event":"ready"}`` once started, ``{"event":"done",...}`` at the end;
  stdin: EOF or ``stop`` ends the run.
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


def gen_of(v: bytes | None) -> int:
    if v is None:
        return -1
    if v.startswith(b"g:"):
        try:
            return int(v.split(b":", 2)[1])
        except ValueError:
            pass
    return -2


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="")
    p.add_argument("--cluster", default="")
    p.add_argument("--keys", required=True)
    p.add_argument("--flash", default="")
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--cold-keys", type=int, default=0)
    p.add_argument("--namespace", default="hotkeyd")
    p.add_argument("--mode", choices=["available", "strict"], default="available")
    p.add_argument("--sharded", action="store_true")
    p.add_argument("--log", required=True)
    a = p.parse_args()
    client: Any
    if a.cluster:
        host, port = a.cluster.split(",")[0].split(":")
        client = redis.cluster.RedisCluster(host=host, port=int(port))
    else:
        client = redis.Redis.from_url(a.url)
    extra: dict[str, Any] = {}
    if a.mode == "strict":
        extra["consistency"] = "strict"  # the SDK option of issue 25 (strict mode)
    ns = Namespace(a.namespace, sharded=a.sharded)
    cache = HotCache(client, namespace=ns, **extra).start()
    keys = a.keys.split(",")
    flash, f0, f1 = "", 0, 0
    if a.flash:
        flash, s0, s1 = a.flash.split(",")
        f0, f1 = int(s0), int(s1)
    stop = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    print(json.dumps({"event": "ready", "lang": "python"}), flush=True)
    out = open(a.log, "w")  # noqa: SIM115 -- written until the end of the run
    buf: list[str] = []
    st = cache.stats
    interval = 1.0 / a.rate
    nxt = time.monotonic()
    reads = errors = i = 0
    mono = time.monotonic_ns
    while not stop.is_set():
        t = mono()
        idx = i % (len(keys) + 1)
        if idx == len(keys) and not (flash and f0 <= t < f1):
            idx = i % len(keys)
        key = flash if idx == len(keys) else keys[idx]
        before = st.hits + st.stale_hits
        try:
            v = cache.get(key)
        except redis.RedisError:
            errors += 1
            v = b"error"
        t1 = mono()
        local = 1 if st.hits + st.stale_hits > before else 0
        buf.append(f"{idx} {gen_of(v)} {t} {t1} {local}\n")
        reads += 1
        if a.cold_keys and i % 20 == 0:
            try:
                cache.get(f"cold:{(i // 20) % a.cold_keys}")
            except redis.RedisError:
                errors += 1
        i += 1
        if len(buf) >= 1000:
            out.write("".join(buf))
            buf.clear()
        nxt += interval
        d = nxt - time.monotonic()
        if d > 0.0005:
            time.sleep(d)
        elif d < -1.0:
            nxt = time.monotonic()
    out.write("".join(buf))
    out.close()
    print(json.dumps({"event": "done", "lang": "python", "reads": reads, "errors": errors,
                      "local_hits": st.hits + st.stale_hits}), flush=True)  # fmt: skip
    cache.close()


if __name__ == "__main__":
    main()
