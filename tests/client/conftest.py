"""Fixtures of the client tests: a fake daemon publisher (``ns`` and ``r``: tests/conftest.py)."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.protocol.wire import Namespace

from .helpers import FakeDaemon


@pytest.fixture
def daemon(r: redis.Redis, ns: Namespace) -> FakeDaemon:
    return FakeDaemon(r, ns)
