"""Build every part of the daemon from its settings: sources, publisher, history
writer, demand intake. :class:`~hotkeyd.daemon.service.Service` only wires them (and
takes ready-made ones instead, for tests and embedding).

Sources: ``-`` is stdin; a path or ``file:///path`` is a file; ``kafka://host:port/topics?...``
is a Kafka consumer group; ``redis-monitor://host:port`` (repeatable) taps Redis with
MONITOR. All MONITOR URLs share one tap source so they share one queue and one scale.
"""

from __future__ import annotations

import sys
from typing import IO, Any
from urllib.parse import urlsplit

from hotkeyd.clock import Clock
from hotkeyd.conn.urls import redact_url
from hotkeyd.daemon.config import Settings
from hotkeyd.detector.detector import CROSSING_EVERY
from hotkeyd.errors import ConfigError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DEMAND_KEY_ENV
from hotkeyd.protocol.wire import Namespace
from hotkeyd.publish import Publisher, RedisPublisher, StdoutPublisher
from hotkeyd.sources.base import Source
from hotkeyd.sources.demand import DemandIntake
from hotkeyd.sources.stream import StreamSource

__all__ = ["make_demand_intake", "make_history", "make_namespace", "make_publisher", "make_sources"]


def make_namespace(settings: Settings) -> Namespace:
    """The deployment's Redis names (prefix, events channel, sharded pub/sub)."""
    return Namespace(
        prefix=settings.namespace,
        channel_override=settings.channel,
        sharded=settings.sharded_pubsub,
    )


def make_publisher(
    settings: Settings,
    *,
    namespace: Namespace,
    instance: str,
    metrics: Metrics,
    clock: Clock,
    stdout: IO[str] | None = None,
) -> Publisher:
    """Redis pub/sub + snapshot with ``redis_url`` (signed with a key file or
    ``HOTKEYD_AUTH_KEY`` when given), else JSON lines on ``stdout``."""
    if not settings.redis_url:
        return StdoutPublisher(
            stdout or sys.stdout, instance=instance, clock=clock, metrics=metrics
        )
    return RedisPublisher(
        settings.redis_url,
        namespace=namespace,
        instance=instance,
        clock=clock,
        metrics=metrics,
        heartbeat=settings.heartbeat,
        auth=make_auth(settings),
    )


def make_auth(settings: Settings) -> MessageAuth | None:
    """The daemon's message signing key (``--auth-key-file``, or the environment)."""
    return (
        MessageAuth.from_file(settings.auth_key_file)
        if settings.auth_key_file
        else MessageAuth.from_env()
    )


def make_watch(settings: Settings, *, namespace: Namespace, instance: str, metrics: Metrics) -> Any:
    """Writes from anywhere: watch the hot keys on the data Redis (hotkeyd.watch)."""
    if not (settings.redis_url and settings.watch):
        return None
    from hotkeyd.watch import Watch

    return Watch(
        settings.watch_url or (settings.redis_url,),
        settings.redis_url,
        namespace=namespace,
        origin=instance,
        auth=make_auth(settings),
        metrics=metrics,
        rearm_budget=settings.watch_rearm_budget,
    )


def make_demand_intake(
    settings: Settings, *, namespace: Namespace, instance: str, metrics: Metrics, clock: Clock
) -> DemandIntake | None:
    """Reads app caches served locally (demand reports): only where apps can send them."""
    if not (settings.redis_url and settings.demand_reports):
        return None
    return DemandIntake(
        settings.redis_url,
        namespace,
        instance,
        metrics=metrics,
        clock=clock,
        auth=(
            MessageAuth.from_file(settings.demand_key_file)
            if settings.demand_key_file
            else MessageAuth.from_env(var=DEMAND_KEY_ENV)
        ),
    )


def make_history(
    settings: Settings, *, namespace: Namespace, instance: str, metrics: Metrics, clock: Clock
) -> Any:
    """The history stream writer (with a Redis URL and ``history`` on), else None."""
    if not (settings.redis_url and settings.history):
        return None
    from hotkeyd.conn.redis import open_client
    from hotkeyd.publish.history import HistoryWriter

    url = settings.redis_url
    return HistoryWriter(
        connect=lambda: open_client(url),
        namespace=namespace,
        instance=instance,
        maxlen=settings.history_maxlen,
        max_age=settings.history_max_age,
        clock=clock,
        metrics=metrics,
    )


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
                    # One batch per crossing check: an earlier ingest finds nothing sooner.
                    linger=CROSSING_EVERY,
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
