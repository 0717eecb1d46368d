"""The factory builds every part of the daemon from its settings (Service only wires them)."""

from __future__ import annotations

import io

import pytest

from hotkeyd.clock import ManualClock
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.factory import make_demand_intake, make_history, make_namespace, make_publisher
from hotkeyd.daemon.service import Service
from hotkeyd.metrics import Metrics
from hotkeyd.publish import RedisPublisher, StdoutPublisher
from hotkeyd.publish.memory import MemoryPublisher
from hotkeyd.sources.demand import DemandIntake


def _parts(settings: Settings) -> dict[str, object]:
    return {
        "namespace": make_namespace(settings),
        "instance": "i1",
        "metrics": Metrics(),
        "clock": ManualClock(),
    }


def test_without_redis_the_publisher_writes_json_lines_and_nothing_else_is_built() -> None:
    s = Settings(http_port=None)
    out = io.StringIO()
    pub = make_publisher(s, stdout=out, **_parts(s))  # type: ignore[arg-type]
    assert isinstance(pub, StdoutPublisher)
    assert make_demand_intake(s, **_parts(s)) is None  # type: ignore[arg-type]
    assert make_history(s, **_parts(s)) is None  # type: ignore[arg-type]


def test_with_redis_every_part_is_built_on_the_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOTKEYD_AUTH_KEY", raising=False)
    s = Settings(
        http_port=None, redis_url="redis://127.0.0.1:1/0", namespace="hk-f", sharded_pubsub=True
    )
    ns = make_namespace(s)
    assert (ns.prefix, ns.sharded, ns.channel) == ("hk-f", True, "hk-f:events")
    assert isinstance(make_publisher(s, **_parts(s)), RedisPublisher)  # type: ignore[arg-type]
    assert isinstance(make_demand_intake(s, **_parts(s)), DemandIntake)  # type: ignore[arg-type]
    assert make_history(s, **_parts(s)) is not None  # type: ignore[arg-type]


def test_the_service_uses_the_factory_and_takes_ready_made_parts() -> None:
    svc = Service(Settings(http_port=None), sources=[], stdout=io.StringIO())
    assert isinstance(svc.publisher, StdoutPublisher)
    mine = MemoryPublisher()
    assert Service(Settings(http_port=None), sources=[], publisher=mine).publisher is mine
