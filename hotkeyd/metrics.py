"""Prometheus metrics for every hotkeyd subsystem.

Every metric lives on an explicit registry handed to :class:`Metrics`, so tests make
a fresh ``CollectorRegistry()`` each and nothing is global. Most gauges are set where
their value changes: the hot-set size (``hotkeyd_detector_hot_keys``) is set by the
detector on every tick, which already knows it for free. A value that is expensive to
keep current is read at scrape time instead, by a custom collector from callbacks the
service registers (:meth:`Metrics.add_gauge_callback`); today that is one gauge:

Scrape-time gauges: ``hotkeyd_sketch_memory_bytes``.

Names follow ``hotkeyd_<subsystem>_<what>_<unit>``; counters end in ``_total``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0)


class _ScrapeTimeCollector(Collector):
    """Reads derived gauges from callbacks when Prometheus scrapes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def add(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        with self._lock:
            self._gauges[name] = (doc, fn)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            items = list(self._gauges.items())
        for name, (doc, fn) in items:
            try:
                value = float(fn())
            except Exception:  # a broken callback must not break the scrape
                continue
            yield GaugeMetricFamily(name, doc, value=value)


class Metrics:
    """All hotkeyd metrics on one registry.

    Args:
        registry: where to register; a fresh ``CollectorRegistry()`` by default so
            two daemons (or two tests) in one process never collide.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # --- intake
        self.events = Counter(
            "hotkeyd_source_events_total",
            "Key accesses ingested, per source.",
            ["source"],
            registry=r,
        )
        self.records = Counter(
            "hotkeyd_source_records_total",
            "Records (messages, lines, MONITOR lines) read, per source.",
            ["source"],
            registry=r,
        )
        self.malformed = Counter(
            "hotkeyd_source_malformed_total",
            "Malformed or rejected inputs, per source and reason.",
            ["source", "reason"],
            registry=r,
        )
        self.late_events = Counter(
            "hotkeyd_detector_late_events_total",
            "Accesses whose event time was older than the window (counted, not rated).",
            registry=r,
        )
        self.skipped_events = Counter(
            "hotkeyd_source_skipped_events_total",
            "Accesses not rated on purpose, per source and reason: max_lag (the source lagged "
            "past --max-lag and fast-forwarded), shed (sampled out under overload).",
            ["source", "reason"],
            registry=r,
        )
        self.source_lag = Gauge(
            "hotkeyd_source_lag_seconds",
            "How far each event-time source's watermark is behind the wall clock.",
            ["source"],
            registry=r,
        )
        self.shed_fraction = Gauge(
            "hotkeyd_source_shed_fraction",
            "Fraction of each source's accesses sampled out to keep up (0: none shed).",
            ["source"],
            registry=r,
        )
        self.source_errors = Counter(
            "hotkeyd_source_errors_total",
            "Source connection failures and reconnects, per source and kind.",
            ["source", "kind"],
            registry=r,
        )
        self.rebalances = Counter(
            "hotkeyd_kafka_partitions_rebalanced_total",
            "Kafka partitions revoked or assigned.",
            ["event"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "hotkeyd_kafka_consumer_lag_messages",
            "Kafka consumer lag per topic-partition.",
            ["topic", "partition"],
            registry=r,
        )
        self.dead_letters = Counter(
            "hotkeyd_kafka_dead_letters_total",
            "Bad records forwarded to the dead-letter topic.",
            registry=r,
        )
        self.monitor_disconnects = Counter(
            "hotkeyd_monitor_disconnects_total",
            "MONITOR tap disconnects, per reason (backlog, error, restart, unreachable).",
            ["reason"],
            registry=r,
        )
        # --- demand reports (reads app caches served locally)
        self.demand_reports = Counter(
            "hotkeyd_demand_reports_total",
            "Demand reports received from app caches (valid ones).",
            registry=r,
        )
        self.demand_local = Counter(
            "hotkeyd_demand_local_accesses_total",
            "Reads app caches served locally, added to the windows of keys hot here.",
            registry=r,
        )
        self.demand_dropped = Counter(
            "hotkeyd_demand_reports_dropped_total",
            "Demand reports dropped, per reason (oversized, unsigned, malformed, version, "
            "too_many_entries, bad_entry, stale, duplicate, rate_limited, budget, overflow; "
            "subscription_lost counts lost subscriptions).",
            ["reason"],
            registry=r,
        )
        self.demand_ignored = Counter(
            "hotkeyd_demand_entries_ignored_total",
            "Demand report entries ignored (not_hot: the key is not hot here) or capped "
            "(capped: an absurd count), per reason.",
            ["reason"],
            registry=r,
        )
        # --- detector
        self.ticks = Counter(
            "hotkeyd_detector_ticks_total", "Detector ticks evaluated.", registry=r
        )
        self.tick_seconds = Histogram(
            "hotkeyd_detector_tick_duration_seconds",
            "Time spent evaluating one tick.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
            registry=r,
        )
        self.hot_keys = Gauge("hotkeyd_detector_hot_keys", "Keys hot now.", registry=r)
        self.longest_hot = Gauge(
            "hotkeyd_detector_longest_hot_seconds",
            "How long the longest-hot key currently hot has been hot.",
            registry=r,
        )
        self.transitions = Counter(
            "hotkeyd_detector_transitions_total",
            "Hot/cool transitions, per kind.",
            ["kind"],
            registry=r,
        )
        self.detection_latency = Histogram(
            "hotkeyd_detector_detection_latency_seconds",
            "From the opening of the sub-window (one --tick) in which a key's rate reached its "
            "threshold to its hot notification being handed to the publisher (upper bound by "
            "< 1 tick).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.publish_latency = Histogram(
            "hotkeyd_detector_publish_latency_seconds",
            "From a sub-window's due close (or the crossing check that found a key hot "
            "between closes) to the hot notification being handed to the publisher.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=r,
        )
        # --- publishing
        self.notifications = Counter(
            "hotkeyd_publish_notifications_total",
            "Notifications (messages) published, per publisher.",
            ["publisher"],
            registry=r,
        )
        self.publish_failures = Counter(
            "hotkeyd_publish_failures_total",
            "Publish or snapshot attempts that failed, per publisher.",
            ["publisher"],
            registry=r,
        )
        self.republishes = Counter(
            "hotkeyd_publish_full_republish_total",
            "Full hot-set republishes (on reconnect or start).",
            registry=r,
        )
        self.publish_coalesced = Counter(
            "hotkeyd_publish_coalesced_total",
            "Queued notifications folded into one full republish (publish queue overflow).",
            ["publisher"],
            registry=r,
        )
        self.history_entries = Counter(
            "hotkeyd_history_entries_total",
            "History stream entries, per result (written, dropped: queue full while Redis was "
            "unreachable).",
            ["result"],
            registry=r,
        )
        self.rule_reloads = Counter(
            "hotkeyd_rules_reloads_total",
            "Rules file reloads, per result (ok, rejected).",
            ["result"],
            registry=r,
        )
        self._scrape = _ScrapeTimeCollector()
        r.register(self._scrape)

    def add_gauge_callback(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """Expose ``fn()`` as a gauge computed at scrape time (e.g. sketch memory)."""
        self._scrape.add(name, doc, fn)
