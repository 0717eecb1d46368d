"""Optional Prometheus metrics of the client SDK, on an explicit registry.

The cache's hot path only bumps plain integers (:class:`~hotkeyd.client.local.CacheStats`);
this collector reads them when Prometheus scrapes, so a local hit costs no metric lock.
Nothing is registered globally: pass the registry your app exposes.

::

    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    cache = HotCache(client, metrics=metrics)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from hotkeyd.client.aiocache import AsyncHotCache
    from hotkeyd.client.cache import HotCache

__all__ = ["ClientMetrics"]

_COUNTERS = (
    (
        "hotkeyd_client_local_hits",
        "Reads of hot keys served from the local cache (incl. stale).",
        ("hits", "stale_hits"),
    ),
    (
        "hotkeyd_client_local_misses",
        "Reads of hot keys that found no fresh local copy.",
        ("misses",),
    ),
    (
        "hotkeyd_client_refreshes",
        "Local copies loaded from Redis (one per single-flight).",
        ("refreshes",),
    ),
    (
        "hotkeyd_client_invalidations",
        "Local copies dropped by invalidation, cooling or reset.",
        ("invalidations",),
    ),
    (
        "hotkeyd_client_evictions",
        "Local copies evicted by the entry or byte bound.",
        ("evictions",),
    ),
)
_SUB_COUNTERS = (
    ("hotkeyd_client_notifications", "Notifications received on the events channel.", "messages"),
    ("hotkeyd_client_sequence_gaps", "Sequence gaps detected (each triggers a resync).", "gaps"),
    ("hotkeyd_client_resyncs", "Resyncs from the Redis snapshots.", "resyncs"),
    ("hotkeyd_client_reconnects", "Reconnects of the subscription.", "reconnects"),
    (
        "hotkeyd_client_bad_messages",
        "Malformed notifications or snapshots (skipped).",
        "bad_messages",
    ),
)
_DEMAND_COUNTERS = (
    ("hotkeyd_client_demand_reports", "Demand reports published to the daemon.", "reports"),
    ("hotkeyd_client_demand_report_bytes", "Bytes of demand reports published.", "bytes"),
    (
        "hotkeyd_client_demand_accesses",
        "Locally served reads reported to the daemon.",
        "accesses",
    ),
    (
        "hotkeyd_client_demand_report_failures",
        "Demand reports whose PUBLISH failed (not retried).",
        "failed",
    ),
    (
        "hotkeyd_client_demand_lost_accesses",
        "Locally served reads in demand reports that could not be sent.",
        "lost",
    ),
    (
        "hotkeyd_client_demand_dropped_accesses",
        "Locally served reads left out of demand reports by their bounds.",
        "dropped",
    ),
)


class ClientMetrics(Collector):
    """Scrape-time collector over every :class:`HotCache` bound to it.

    Args:
        registry: where to register (a fresh ``CollectorRegistry()`` when omitted).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        self._caches: list[HotCache | AsyncHotCache] = []
        self.registry.register(self)

    def bind(self, cache: HotCache | AsyncHotCache) -> None:
        """Report ``cache`` (the caches call this when given ``metrics=``)."""
        with self._lock:
            self._caches.append(cache)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            caches = list(self._caches)
        for name, doc, fields in _COUNTERS:
            total = sum(getattr(c.local.stats, f) for c in caches for f in fields)
            yield CounterMetricFamily(name, doc, value=total)
        subs = {id(c.subscriber): c.subscriber for c in caches}.values()
        for name, doc, field in _SUB_COUNTERS:
            yield CounterMetricFamily(name, doc, value=sum(getattr(s.stats, field) for s in subs))
        demand = [d for d in (c.demand_stats for c in caches) if d is not None]
        for name, doc, field in _DEMAND_COUNTERS:
            yield CounterMetricFamily(name, doc, value=sum(getattr(d, field) for d in demand))
        yield GaugeMetricFamily(
            "hotkeyd_client_cache_entries",
            "Entries in the local caches.",
            value=sum(len(c.local) for c in caches),
        )
        yield GaugeMetricFamily(
            "hotkeyd_client_cache_bytes",
            "Estimated bytes held by the local caches.",
            value=sum(c.local.nbytes for c in caches),
        )
        yield GaugeMetricFamily(
            "hotkeyd_client_hot_keys",
            "Keys the client currently considers hot.",
            value=sum(len(h) for h in {id(c.hotset): c.hotset for c in caches}.values()),
        )
