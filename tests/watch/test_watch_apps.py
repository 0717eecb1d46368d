"""Go, Node and Java apps against a real daemon (hotkeyd run, stdin source) and Redis.

A plain SET by a non-SDK client drops each app's copy within milliseconds (the daemon's
watch broadcasts the invalidation); in strict mode a stopped daemon (SIGSTOP: no
heartbeat) stops local serving within the 300 ms lease and it resumes after SIGCONT.
The apps are the read apps of tests/interop (one line protocol in every language).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.client.watchguard import LEASE_S
from hotkeyd.testing import RedisServer
from hotkeyd.testing.daemon import DaemonProcess
from tests.interop.apps import ReadApp

from .test_watch import BOUND, _Load

pytestmark = pytest.mark.integration


def _stop(app: ReadApp) -> None:
    """Stop the app; kill it (closing its files) if it does not stop in time."""
    try:
        app.stop()
    except AssertionError:
        app.kill()
        raise


SLACK = 0.15  # s: the app's read loop and the line protocol on a loaded 2-core machine


@pytest.mark.parametrize(
    ("lang", "sharded"),
    # Go's sharded variant passes too (stopped 206-294 ms after SIGSTOP); left out of CI
    # for time, since Go followed the sharded heartbeats before
    [("go", False), ("node", False), ("java", False), ("node", True), ("java", True)],
    ids=["go", "node", "java", "node-sharded", "java-sharded"],
)
def test_app_sees_a_direct_set_and_strict_follows_the_heartbeat(
    lang: str, sharded: bool, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Sharded: the daemon SPUBLISHes (``--sharded-pubsub``) and the app SSUBSCRIBEs, the
    heartbeats on a channel of their own slot (Java's strict mode used to serve nothing
    locally there: it did not follow them)."""
    key = f"item:{lang}:{int(sharded)}"
    data = redis.Redis.from_url(redis_server.url)
    data.set(key, "v0")
    with DaemonProcess(
        "--redis-url", redis_server.url, "--window", "0.5",
        *(["--sharded-pubsub"] if sharded else []),
    ) as d, _Load(d, {key.encode(): 3000.0}):  # fmt: skip
        app = ReadApp(lang, tmp_path, "--url", redis_server.url, "--key", key, "--rate", "2000",
                      "--consistency", "strict", *(["--sharded"] if sharded else []))  # fmt: skip
        try:
            app.wait_event(lambda e: e.get("event") == "ready", 90, "ready line")
            app.wait_event(lambda e: e.get("event") == "source" and e["local"], 15, "local serving")
            for i in range(3):
                value = f"direct-{i}"
                wrote = time.time() * 1000.0
                data.set(key, value)  # not through the SDK
                _, seen = app.wait_event(
                    lambda e, v=value: e.get("event") == "value" and e.get("value") == v,
                    5,
                    "the directly written value",
                )
                lag = (seen["t"] - wrote) / 1000.0
                print(
                    f"{lang} (sharded={sharded}) app saw direct SET {i} after {lag * 1000:.2f} ms"
                )
                assert lag < BOUND, lag  # without the watch: the key's TTL (seconds)
                time.sleep(0.1)
            app.wait_event(lambda e: e.get("event") == "source" and e["local"], 5, "local again")
            assert d.proc is not None
            stopped = time.time() * 1000.0
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                _, off = app.wait_event(
                    lambda e: e.get("event") == "source" and not e["local"] and e["t"] > stopped,
                    5,
                    "reads sent to Redis after SIGSTOP",
                )
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            resumed = time.time() * 1000.0
            _, on = app.wait_event(
                lambda e: e.get("event") == "source" and e["local"] and e["t"] > resumed,
                5,
                "local serving after SIGCONT",
            )
            lapse = (off["t"] - stopped) / 1000.0
            print(f"{lang} (sharded={sharded}) strict: local serving stopped {lapse * 1000:.0f} ms after SIGSTOP, "
                  f"resumed {on['t'] - resumed:.0f} ms after SIGCONT")  # fmt: skip
            assert lapse <= LEASE_S + SLACK, lapse
        finally:
            _stop(app)


@pytest.mark.parametrize("lang", ["go", "node", "java"])
def test_available_app_serves_through_a_stopped_daemon_and_counts_the_lapse(
    lang: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    key = f"item:avail:{lang}"
    redis.Redis.from_url(redis_server.url).set(key, "v0")
    with DaemonProcess("--redis-url", redis_server.url, "--window", "0.5") as d, _Load(
        d, {key.encode(): 3000.0}
    ):  # fmt: skip
        app = ReadApp(lang, tmp_path, "--url", redis_server.url, "--key", key, "--rate", "2000")
        try:
            app.wait_event(lambda e: e.get("event") == "ready", 90, "ready line")
            _, before = app.wait_event(
                lambda e: e.get("event") == "stats" and e.get("hot") and e["local_hits"] > 0,
                15,
                "local serving",
            )
            assert d.proc is not None
            stopped = time.time() * 1000.0
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                _, during = app.wait_event(
                    lambda e: e.get("event") == "stats" and e["t"] > stopped + 1000,
                    5,
                    "stats a second into the pause",
                )
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            # served locally through the pause (the key's TTL is 5 s), the lapse counted
            assert during["local_hits"] - before["local_hits"] > 500, (before, during)
            assert during["lapsed"] > 0 and during["strict_misses"] == 0, during
            print(f"{lang} available: {during['local_hits'] - before['local_hits']} local reads "
                  f"and lapsed {during['lapsed']} during the pause")  # fmt: skip
        finally:
            _stop(app)
