"""Redis and daemon faults with real processes (issue 14's matrix): what was counted,
lost and stale, and for how long. Each test prints its figures (pytest -s shows them;
README's operations table quotes them)."""

from __future__ import annotations

import signal
import time

import pytest
import redis

from hotkeyd.client import Subscriber
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from tests.service.daemon import Daemon

from .conftest import Load, seconds_until

pytestmark = pytest.mark.integration

HOT = {b"hot:1": 2000.0}


def _daemon(rs: RedisServer, ns: Namespace, rules: str) -> Daemon:
    return Daemon(
        "--redis-url",
        rs.url,
        "--namespace",
        ns.prefix,
        "--window",
        "0.5",
        "--rules",
        rules,
        "--heartbeat",
        "0.5",
    )


def test_redis_sigkill_and_restart(redis_server: RedisServer, unique: str, rules_ttl2: str) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    r = redis.Redis.from_url(redis_server.url)
    with _daemon(redis_server, ns, rules_ttl2) as d, Load(d, HOT):
        sub = Subscriber(r, namespace=ns, backoff=(0.05, 0.5)).start()
        try:
            assert sub.wait_ready(10)
            seconds_until(lambda: b"hot:1" in sub.hotset, 15)
            events_before = d.metric("hotkeyd_source_events_total")
            redis_server.kill()
            time.sleep(2.0)
            events_down = d.metric("hotkeyd_source_events_total")
            redis_server.start()
            back = seconds_until(
                lambda: sub.connected and b"hot:1" in sub.hotset and sub.stats.reconnects >= 1,
                30,
            )
            print(
                f"\nredis SIGKILL: intake went on ({events_down - events_before:.0f} events "
                f"while down); subscriber hot again {back:.1f} s after redis returned"
            )
            assert events_down > events_before  # detection never stopped
            assert back < 15.0
            assert d.proc is not None and d.proc.poll() is None
        finally:
            sub.stop()
    r.close()


def test_redis_sigstop_intake_continues(
    redis_server: RedisServer, unique: str, rules_ttl2: str
) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    with _daemon(redis_server, ns, rules_ttl2) as d, Load(d, HOT):
        seconds_until(lambda: d.metric("hotkeyd_source_events_total") > 1000, 15)
        assert redis_server.proc is not None
        rss0 = _rss(d)
        before = d.metric("hotkeyd_source_events_total")
        redis_server.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(5.0)
            during = d.metric("hotkeyd_source_events_total") - before
            rss1 = _rss(d)
            health = d.health()
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)
        print(
            f"\nredis SIGSTOP 5 s: {during:.0f} events counted while stopped, "
            f"RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB, /healthz {health}"
        )
        assert during > 5000  # ~2000/s kept flowing into the detector
        assert rss1 - rss0 < 50 << 20
        assert d.proc is not None and d.proc.poll() is None


def test_daemon_sigkill_clients_keep_keys_until_ttl(
    redis_server: RedisServer, unique: str, rules_ttl2: str
) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    r = redis.Redis.from_url(redis_server.url)
    sub = Subscriber(r, namespace=ns).start()
    try:
        with _daemon(redis_server, ns, rules_ttl2) as d, Load(d, HOT):
            assert sub.wait_ready(10)
            seconds_until(lambda: b"hot:1" in sub.hotset, 15)
            time.sleep(1.2)  # let a re-announcement (ttl/2) go out
            assert d.proc is not None
            d.proc.kill()
            killed = time.monotonic()
        assert b"hot:1" in sub.hotset  # still served after the crash ...
        seconds_until(lambda: b"hot:1" not in sub.hotset, 10)
        stale_for = time.monotonic() - killed
        print(
            f"\ndaemon SIGKILL: clients kept the key {stale_for:.1f} s (TTL 2 s), then dropped it"
        )
        assert 0.3 < stale_for <= 2.5  # ... until its TTL, never longer
    finally:
        sub.stop()
        r.close()


def test_client_kill_type_pubsub(redis_server: RedisServer, unique: str, rules_ttl2: str) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    r = redis.Redis.from_url(redis_server.url)
    admin = redis.Redis.from_url(redis_server.url)
    with _daemon(redis_server, ns, rules_ttl2) as d, Load(d, HOT):
        sub = Subscriber(r, namespace=ns, backoff=(0.05, 0.5)).start()
        try:
            assert sub.wait_ready(10)
            seconds_until(lambda: b"hot:1" in sub.hotset, 15)
            killed = admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            back = seconds_until(lambda: sub.stats.reconnects >= 1 and sub.connected, 10)
            assert b"hot:1" in sub.hotset  # the snapshot restored it at once
            print(
                f"\nCLIENT KILL TYPE pubsub: {killed} connection(s) killed; subscriber back "
                f"in {back:.2f} s, key hot throughout"
            )
            assert back < 5.0
        finally:
            sub.stop()
    admin.close()
    r.close()


def _rss(d: Daemon) -> int:
    assert d.proc is not None
    with open(f"/proc/{d.proc.pid}/statm") as f:
        return int(f.read().split()[1]) * 4096
