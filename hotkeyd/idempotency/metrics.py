"""Optional Prometheus metrics of idempotency guards, on an explicit registry.

The guards only bump plain integers (:class:`~hotkeyd.idempotency.core.GuardStats`);
this collector reads them when Prometheus scrapes. Nothing is registered globally::

    registry = CollectorRegistry()
    IdempotencyMetrics(registry).watch(guard)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from hotkeyd.idempotency.core import GuardSettings, GuardStats

__all__ = ["IdempotencyMetrics"]

_COUNTERS = (
    ("takeovers", "Leases taken over after the holder's lease ran out."),
    ("store_replays", "Answers from the durable store for keys Redis had forgotten."),
    ("lease_lost", "Fenced steps refused: the holder had lost its lease."),
    ("duplicates", "Completions refused by the durable store's unique key."),
    ("bad_input", "Keys refused as empty, too long or not printable ASCII."),
    ("unavailable", "Redis or store failures (raised when closed, tolerated when open)."),
)


class _Guard(Protocol):
    settings: GuardSettings

    @property
    def stats(self) -> GuardStats: ...


G = TypeVar("G", bound=_Guard)


class IdempotencyMetrics(Collector):
    """``hotkeyd_idempotency_*`` counters of the guards it watches, labelled by scope."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._guards: list[_Guard] = []
        registry.register(self)

    def watch(self, guard: G) -> G:
        """Report ``guard``'s counters (returns it, for chaining)."""
        with self._lock:
            self._guards.append(guard)
        return guard

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            guards = list(self._guards)
        begins = CounterMetricFamily(
            "hotkeyd_idempotency_begins",
            "begin() answers by outcome.",
            labels=["scope", "outcome"],
        )
        families = {
            name: CounterMetricFamily(f"hotkeyd_idempotency_{name}", doc, labels=["scope"])
            for name, doc in _COUNTERS
        }
        for g in guards:
            st, scope = g.stats, g.settings.scope
            for outcome in ("new", "in_progress", "done", "mismatch"):
                begins.add_metric([scope, outcome], getattr(st, outcome))
            for name, fam in families.items():
                fam.add_metric([scope], getattr(st, name))
        yield begins
        yield from families.values()
