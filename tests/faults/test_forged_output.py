"""`hotkeyd watch` and `hotkeyd top` on forged input (issue 14): never a traceback, and
nothing from the wire reaches the operator's terminal unescaped (ESC, C1, bidi)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

pytestmark = pytest.mark.integration

ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
BIDI = "\u202e"
FORGED = [
    json.dumps(
        {
            "v": 1,
            "instance": "evil" + ESC,
            "seq": 1,
            "ts": 1e18,
            "hot": [
                {
                    "key": "k" + ESC,
                    "rate": 1.0,
                    "rule": "r" + ESC + BIDI,
                    "ttl_ms": 5,
                    "kind": "read",
                }
            ],
            "cool": [{"key": "c", "rule": ESC}],
        }
    ).encode(),
    b"\x1b[2Jnot json\x9b",
    b"[" * 100_000,
    json.dumps({"v": 1, "instance": "x", "seq": "1", "ts": 1}).encode(),
    b'{"v":1,"instance":"\x1b[2J","seq":1,"ts":1}',  # raw ESC inside a JSON string
    json.dumps({"v": 1, "instance": "ok", "seq": 2, "ts": 1.0, "hot": [], "cool": []}).encode(),
]


def _clean(text: str) -> None:
    assert "Traceback" not in text
    for bad in ("\x1b", "\x07", "\x9b", BIDI):
        assert bad not in text, repr(text[:300])


@pytest.mark.parametrize("as_json", [False, True])
def test_watch_survives_and_escapes_forged_messages(
    redis_server: RedisServer, unique: str, as_json: bool
) -> None:
    channel = f"ev-{unique}"
    cmd = [
        sys.executable,
        "-m",
        "hotkeyd",
        "watch",
        "--redis-url",
        redis_server.url,
        "--channel",
        channel,
        "--count",
        str(len(FORGED)),
    ]
    watch = subprocess.Popen(
        [*cmd, "--json"] if as_json else cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",
    )
    r = redis.Redis.from_url(redis_server.url)
    stop = threading.Event()

    def publish() -> None:  # until watch has subscribed and seen them all
        while not stop.is_set() and watch.poll() is None:
            if r.pubsub_numsub(channel)[0][1]:
                for m in FORGED:
                    r.publish(channel, m)
                return
            time.sleep(0.05)

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    try:
        out, err = watch.communicate(timeout=30)
    finally:
        stop.set()
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
        r.close()
    assert watch.returncode == 0, err
    _clean(out)
    _clean(err)
    assert "malformed message" in err
    if not as_json:
        assert "evil\\x1b]0;pwned" in out and "ts=1e+18" in out
        assert "ok #2 (no changes)" in out


def test_top_survives_and_escapes_forged_snapshots(redis_server: RedisServer, unique: str) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    r = redis.Redis.from_url(redis_server.url)
    snap = {
        "v": 1,
        "instance": "evil" + ESC,
        "seq": 1,
        "ts": time.time(),
        "full": True,
        "hot": [{"key": "k" + ESC, "rate": 9.0, "rule": BIDI + "r", "ttl_ms": 5000}],
        "cool": [],
        "top": [{"key": "t", "rate": "lots", "rule": ESC}, {"key": 5}, "x"],
    }
    r.set(ns.snapshot("evil" + ESC), json.dumps(snap))
    r.zadd(ns.instances, {"evil" + ESC: time.time()})
    r.set(ns.snapshot("deep"), b"[" * 100_000)
    r.zadd(ns.instances, {"deep": time.time()})
    r.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotkeyd",
            "top",
            "--redis-url",
            redis_server.url,
            "--namespace",
            ns.prefix,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        errors="surrogateescape",
    )
    assert out.returncode == 0, out.stderr
    _clean(out.stdout)
    _clean(out.stderr)
    assert "k\\x1b]0;pwned" in out.stdout and "hot keys: 1" in out.stdout
