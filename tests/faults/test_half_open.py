"""A half-open connection between an app and Redis (issue 14's matrix): a proxy that
stops forwarding without closing. The subscriber notices (PING, no PONG), drops the
connection, and is back once the path works again; meanwhile its keys age out by TTL."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.client import Subscriber
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from tests.service.daemon import Daemon

from .conftest import Load, seconds_until
from .proxy import FreezableProxy

pytestmark = pytest.mark.integration


def test_half_open_subscription_is_detected_and_replaced(
    redis_server: RedisServer, unique: str, rules_ttl2: str
) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    with (
        FreezableProxy(redis_server.port) as proxy,
        Daemon(
            "--redis-url",
            redis_server.url,
            "--namespace",
            ns.prefix,
            "--window",
            "0.5",
            "--rules",
            rules_ttl2,
        ) as d,
        Load(d, {b"hot:1": 2000.0}),
    ):
        r = redis.Redis.from_url(proxy.url(), socket_timeout=3.0, socket_connect_timeout=3.0)
        sub = Subscriber(r, namespace=ns, backoff=(0.05, 0.5), health_interval=1.0).start()
        try:
            assert sub.wait_ready(10)
            seconds_until(lambda: b"hot:1" in sub.hotset, 15)
            proxy.freeze()
            noticed = seconds_until(lambda: not sub.connected, 15)
            aged = seconds_until(lambda: b"hot:1" not in sub.hotset, 10)  # TTL 2 s
            proxy.thaw()
            back = seconds_until(lambda: sub.connected and b"hot:1" in sub.hotset, 20)
            print(
                f"\nhalf-open subscription: noticed in {noticed:.1f} s, key aged out "
                f"{aged:.1f} s later (TTL), back {back:.1f} s after the path healed"
            )
            assert noticed < 6.0  # health_interval 1 s: PING after 1 s, no PONG 1 s later
            assert sub.stats.reconnects >= 1
        finally:
            sub.stop()
            r.close()


def test_half_open_async_subscription_is_detected(redis_server: RedisServer, unique: str) -> None:
    """The asyncio subscriber notices the same way (shared Liveness)."""
    import asyncio

    import redis.asyncio as aredis

    from hotkeyd.client.aio import AsyncSubscriber

    async def main() -> tuple[float, int]:
        with FreezableProxy(redis_server.port) as proxy:
            r = aredis.Redis.from_url(proxy.url(), socket_timeout=3.0, socket_connect_timeout=3.0)
            sub = AsyncSubscriber(
                r,
                namespace=Namespace(prefix=f"hk-{unique}"),
                backoff=(0.05, 0.5),
                health_interval=1.0,
            )
            await sub.start()
            try:
                assert await sub.wait_ready(10)
                proxy.freeze()
                t0 = asyncio.get_running_loop().time()
                while sub.connected:
                    assert asyncio.get_running_loop().time() - t0 < 15
                    await asyncio.sleep(0.05)
                noticed = asyncio.get_running_loop().time() - t0
                proxy.thaw()
                while not (sub.connected and sub.stats.reconnects >= 1):
                    assert asyncio.get_running_loop().time() - t0 < 30
                    await asyncio.sleep(0.05)
                return noticed, sub.stats.reconnects
            finally:
                await sub.stop()
                await r.aclose()

    noticed, reconnects = asyncio.run(main())
    assert noticed < 6.0 and reconnects >= 1
