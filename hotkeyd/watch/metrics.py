"""The watch's metrics (one family per name, labelled by node)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from hotkeyd.metrics import Metrics


class WatchMetrics:
    """The watch's counters, on the daemon's registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.armed = Counter(
            "hotkeyd_watch_armed_total", "Keys armed for tracking (CLIENT CACHING yes + EXISTS).",
            ["node"], registry=r,
        )  # fmt: skip
        self.invalidations = Counter(
            "hotkeyd_watch_invalidations_total",
            "Keys invalidated on the bus because the data Redis reported a write, per cause "
            "(write, flush, reconnect, deferred: again after a spaced re-arm, moved: its "
            "slot's new owner armed it).",
            ["node", "cause"], registry=r,
        )  # fmt: skip
        self.reconnects = Counter(
            "hotkeyd_watch_reconnects_total", "Watch connections (re)established after the first.",
            ["node"], registry=r,
        )  # fmt: skip
        self.up = Gauge(
            "hotkeyd_watch_up", "1 while the node's watch connection has tracking on.",
            ["node"], registry=r,
        )  # fmt: skip
        self.epoch = Gauge(
            "hotkeyd_watch_epoch", "The node's watch epoch (bumped by every reconnect).",
            ["node"], registry=r,
        )  # fmt: skip
        self.spacing = Gauge(
            "hotkeyd_watch_rearm_spacing_seconds",
            "Least time between two re-arms of one key on the node: 0.05 s, more while the "
            "keys written in the last second would cost more re-arms than the budget.",
            ["node"], registry=r,
        )  # fmt: skip
        self.watched = Gauge(
            "hotkeyd_watch_keys", "Hot keys currently armed on the node.", ["node"], registry=r
        )
