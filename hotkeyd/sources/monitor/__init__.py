"""The Redis MONITOR tap: connection, C parser with a pure twin, key extraction, taps."""

from hotkeyd.sources.monitor.source import MonitorSource

__all__ = ["MonitorSource"]
