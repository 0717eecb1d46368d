"""Sources of key-access events: stdin/files, Kafka, Redis MONITOR."""

from hotkeyd.batch import Batch
from hotkeyd.sources.base import Source

__all__ = ["Batch", "Source"]
