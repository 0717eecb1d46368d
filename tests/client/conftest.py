"""Fixtures of the client tests: a namespace per test and a fake daemon publisher."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from hotkeyd.testing import RedisServer
from hotkeyd.wire import Namespace

from .helpers import FakeDaemon


@pytest.fixture
def ns(unique: str) -> Namespace:
    return Namespace(prefix=f"hk-{unique}")


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def daemon(r: redis.Redis, ns: Namespace) -> FakeDaemon:
    return FakeDaemon(r, ns)
