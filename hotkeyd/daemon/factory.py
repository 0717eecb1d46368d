"""Turn ``--source`` URLs into source objects.

``-`` is stdin; a path or ``file:///path`` is a file; ``kafka://host:port/topics?...``
is a Kafka consumer group; ``redis-monitor://host:port`` (repeatable) taps Redis with
MONITOR. All MONITOR URLs share one tap source so they share one queue and one scale.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hotkeyd.clock import Clock
from hotkeyd.conn.urls import redact_url
from hotkeyd.daemon.config import Settings
from hotkeyd.errors import ConfigError
from hotkeyd.metrics import Metrics
from hotkeyd.sources.base import Source
from hotkeyd.sources.stream import StreamSource

__all__ = ["make_sources"]

_MONITOR_SCHEMES = ("redis-monitor", "redis-monitor+tls", "rediss-monitor")


def make_sources(settings: Settings, *, metrics: Metrics, clock: Clock) -> list[Source]:
    """Build one source per URL in ``settings.sources`` (MONITOR URLs grouped)."""
    sources: list[Source] = []
    monitor_urls: list[str] = []
    for url in settings.sources:
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        if url == "-" or scheme in ("", "file"):
            path = url[len("file://") :] if scheme == "file" else url
            sources.append(
                StreamSource(
                    path,
                    metrics=metrics,
                    counted=settings.input_format == "counted",
                    follow=settings.follow,
                    max_line=settings.max_key_len + 32,
                )
            )
        elif scheme in ("kafka", "kafkas", "kafka+ssl"):
            from hotkeyd.conn.kafka import parse_kafka_url
            from hotkeyd.sources.kafka.source import KafkaSource

            sources.append(
                KafkaSource(
                    parse_kafka_url(url),
                    metrics=metrics,
                    clock=clock,
                    max_key_len=settings.max_key_len,
                    max_lag=settings.max_lag,
                )
            )
        elif scheme in _MONITOR_SCHEMES:
            monitor_urls.append(url)
        else:
            raise ConfigError(
                f"unsupported source {redact_url(url)!r}: use '-', a file path, kafka://host:port/topic "
                "or redis-monitor://host:port"
            )
    if monitor_urls:
        from hotkeyd.sources.monitor.source import MonitorSource

        sources.append(
            MonitorSource(
                monitor_urls,
                duty=settings.monitor_duty,
                metrics=metrics,
                clock=clock,
                max_line=settings.monitor_max_line,
            )
        )
    return sources
