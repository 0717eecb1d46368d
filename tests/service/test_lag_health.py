"""A lagging source shows in /healthz (degraded above --lag-alert) and in the lag metric."""

from __future__ import annotations

import time

from hotkeyd.batch import Batch
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.service import Service
from hotkeyd.publish.memory import MemoryPublisher


class _Behind:
    """Hands over one batch stamped 30 s ago per call (a consumer 30 s behind), then stops."""

    name = "behind"
    reports_idle = True  # never "caught up": the lag stays until data says otherwise
    exhausted = False
    error = None
    connected = True
    unhealthy = None

    def __init__(self, box: list[Service], seen: list[dict[str, object]]) -> None:
        self.box, self.seen, self.calls = box, seen, 0

    def idle_watermark(self) -> None:
        return None

    def start(self) -> None:
        pass

    def next_batch(self, max_wait: float) -> list[Batch]:
        self.calls += 1
        svc = self.box[0]
        if self.calls == 5:
            self.seen.append(svc.health()[1])
        if self.calls >= 6:
            svc.request_stop()
            return []
        time.sleep(0.05)
        return [Batch(keys=[b"k"], counts=[10], ts=time.time() - 30.0, source="behind")]

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_lagging_source_makes_healthz_degraded_and_sets_the_lag_metric() -> None:
    box: list[Service] = []
    seen: list[dict[str, object]] = []
    svc = Service(
        Settings(http_port=None, lag_alert=10.0),
        sources=[_Behind(box, seen)],
        publisher=MemoryPublisher(instance="t"),
    )
    box.append(svc)
    assert svc.run() == 0
    (health,) = seen
    assert health["status"] == "degraded"
    lag = health["lag_seconds"]["behind"]  # type: ignore[index]
    assert 29.0 <= lag <= 32.0
    assert any("behind" in r and "lag alert 10s" in r for r in health["reasons"])  # type: ignore[attr-defined]
    metric = svc.metrics.registry.get_sample_value(
        "hotkeyd_source_lag_seconds", {"source": "behind"}
    )
    assert metric is not None and 29.0 <= metric <= 32.0
