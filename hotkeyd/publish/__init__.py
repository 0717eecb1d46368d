"""Publishers: where hot/cool notifications go.

* :class:`RedisPublisher` -- the Redis channel plus a per-instance snapshot, sent from
  a background thread so the detector never waits on the network;
* :class:`StdoutPublisher` -- JSON lines on a stream, the default without Redis;
* :class:`MemoryPublisher` -- records messages, for tests.

All follow the :class:`Publisher` protocol.
"""

from __future__ import annotations

from hotkeyd.publish.base import (
    HotSetState,
    Publisher,
    default_instance_id,
    normalize_top,
)
from hotkeyd.publish.memory import MemoryPublisher
from hotkeyd.publish.redis import RedisPublisher
from hotkeyd.publish.stdout import StdoutPublisher

__all__ = [
    "HotSetState",
    "MemoryPublisher",
    "Publisher",
    "RedisPublisher",
    "StdoutPublisher",
    "default_instance_id",
    "normalize_top",
]
