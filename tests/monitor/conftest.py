"""Fixtures of the MONITOR tap tests: the real server's command table, both parsers."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hotkeyd.conn.redis import parse_redis_url
from hotkeyd.metrics import Metrics
from hotkeyd.sources.monitor import _monitor_py
from hotkeyd.sources.monitor.conn import RespConnection
from hotkeyd.sources.monitor.keyspec import entries_from_command_reply
from hotkeyd.sources.monitor.source import MonitorSource
from hotkeyd.testing import RedisServer

from .helpers import _monitor_c


@pytest.fixture(scope="session")
def command_reply(shared_redis: RedisServer) -> list[Any]:
    """The real server's COMMAND INFO reply (decoded RESP2)."""
    conn = RespConnection(parse_redis_url(shared_redis.url), 5.0)
    try:
        reply = conn.call("COMMAND", "INFO")
    finally:
        conn.close()
    assert isinstance(reply, list) and len(reply) > 100
    return reply


def _impls() -> list[Any]:
    out: list[Any] = [pytest.param(_monitor_py, id="python")]
    if _monitor_c is not None:
        out.insert(0, pytest.param(_monitor_c, id="c"))
    return out


@pytest.fixture(params=_impls())
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """The C parser and its pure-Python twin, in turn."""
    return request.param


@pytest.fixture
def table(impl: ModuleType, command_reply: list[Any]) -> Iterator[Any]:
    """The real server's command table, built for the implementation under test."""
    yield impl.Table(entries_from_command_reply(command_reply))


@pytest.fixture
def metrics() -> Metrics:
    """A fresh metrics registry per test."""
    return Metrics(CollectorRegistry())


@pytest.fixture
def source_factory(metrics: Metrics) -> Iterator[Any]:
    """Builds MonitorSources (sharing ``metrics``) and closes them all at teardown."""
    made: list[MonitorSource] = []

    def make(urls: list[str], **kw: Any) -> MonitorSource:
        kw.setdefault("metrics", metrics)
        src = MonitorSource(urls, **kw)
        made.append(src)
        return src

    yield make
    for s in made:
        s.close()
