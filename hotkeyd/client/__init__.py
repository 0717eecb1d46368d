"""Client SDK: follow the daemon's hot-key notifications and cache hot keys locally.

- :class:`HotSet` - which keys are hot now (sequence-checked, TTL-expired, callbacks).
- :class:`Subscriber` / :class:`AsyncSubscriber` - keep a HotSet current from Redis
  (subscribe, then snapshot, then buffered messages; resync on gaps and reconnects).
- :class:`HotCache` / :class:`AsyncHotCache` - redis-py / redis.asyncio wrapper serving
  hot keys from a bounded local cache with single-flight refresh, and broadcasting
  invalidations on writes.
- :class:`ShardedCounter` - split a write-hot counter over N keys; never oversells.
- :class:`Namespace` - the deployment's Redis names (prefix, channel, sharded pub/sub).
- :class:`ClientMetrics` - optional Prometheus metrics on an explicit registry.

``ClientMetrics`` is imported on first use (PEP 562 ``__getattr__``): prometheus-client is
the ``hotkeyd[metrics]`` extra, and an app that never asks for metrics need not have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hotkeyd.client.aio import AsyncSubscriber
from hotkeyd.client.aiocache import AsyncHotCache
from hotkeyd.client.cache import HotCache
from hotkeyd.client.hotset import ApplyResult, HotItem, HotSet
from hotkeyd.client.invalidation import ServerTracking, decode_invalidation, encode_invalidation
from hotkeyd.client.local import CacheStats, LocalCache
from hotkeyd.client.sharded import PartialTakeError, ShardedCounter
from hotkeyd.client.snapshots import read_snapshots
from hotkeyd.client.subscriber import Subscriber, SubscriberStats
from hotkeyd.errors import import_extra
from hotkeyd.protocol.wire import Namespace

if TYPE_CHECKING:
    from hotkeyd.client.metrics import ClientMetrics

__all__ = [
    "ApplyResult",
    "AsyncHotCache",
    "AsyncSubscriber",
    "CacheStats",
    "ClientMetrics",
    "HotCache",
    "HotItem",
    "HotSet",
    "LocalCache",
    "Namespace",
    "PartialTakeError",
    "ServerTracking",
    "ShardedCounter",
    "Subscriber",
    "SubscriberStats",
    "decode_invalidation",
    "encode_invalidation",
    "read_snapshots",
]


def __getattr__(name: str) -> Any:
    if name == "ClientMetrics":
        return import_extra("hotkeyd.client.metrics", name, "metrics")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
