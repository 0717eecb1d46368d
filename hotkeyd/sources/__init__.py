"""Sources of key-access events: stdin/files, Kafka, Redis MONITOR."""

from hotkeyd.sources.base import Batch, Source

__all__ = ["Batch", "Source"]
