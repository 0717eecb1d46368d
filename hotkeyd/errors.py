"""The one exception tree of hotkeyd.

Every error hotkeyd raises on purpose derives from :class:`HotkeydError`, so an
application can catch everything with one clause. Third-party errors (redis-py,
kafka-python, OS errors) are translated at the adapter that meets them with
``raise X(...) from exc``, so callers never need to import those libraries' errors.

::

    HotkeydError
     ├── ConfigError(ValueError)          bad option, URL, or settings file
     │    └── RulesError                  malformed rules file (names line and field)
     ├── SketchError(ValueError)          bad value given to a sketch (k, memory, count, key length)
     │    └── SerializationError          corrupt or truncated sketch bytes
     ├── SourceError                      a source could not be read
     │    ├── KafkaSourceError            broker unreachable, auth failure, bad topic
     │    └── MonitorError                MONITOR tap failure
     │         └── MonitorPermissionError the Redis user may not run MONITOR
     ├── PublishError                     Redis publish/snapshot failure
     ├── UnreachableError(ConnectionError) a server could not be reached
     └── ClientError                      client SDK misuse or failure
          └── IdempotencyError            the idempotency guard (hotkeyd.idempotency.errors)

Modules define narrower errors beside the code that raises them, always under this
tree: the idempotency guard's (:mod:`hotkeyd.idempotency.errors`),
``hotkeyd.protocol.wire.WireError`` (a malformed message; ``HotkeydError, ValueError``),
``hotkeyd.detector.glob.GlobError`` (a ``ConfigError``), and the MONITOR tap's
``RespError`` (a ``MonitorError``) and ``Unreachable`` (both a ``MonitorError`` and an
``UnreachableError``). ``tests/test_public_api.py`` walks every module to keep it so.

Type errors stay plain :class:`TypeError`, as Python convention expects.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ClientError",
    "ConfigError",
    "HotkeydError",
    "KafkaSourceError",
    "MonitorError",
    "MonitorPermissionError",
    "PublishError",
    "RulesError",
    "SerializationError",
    "SketchError",
    "SourceError",
    "UnreachableError",
]


class HotkeydError(Exception):
    """Root of every error hotkeyd raises on purpose."""


class ConfigError(HotkeydError, ValueError):
    """An option, URL or settings file is invalid."""


class RulesError(ConfigError):
    """A rules file is invalid; the message names the line and field."""


class SketchError(HotkeydError, ValueError):
    """A value given to a sketch is out of range (the message gives the range)."""


class SerializationError(SketchError):
    """Serialized sketch bytes are corrupt, truncated or of an unknown version."""


class SourceError(HotkeydError):
    """A source of key-access events failed."""


class KafkaSourceError(SourceError):
    """The Kafka source failed (broker unreachable, authentication, topic)."""


class MonitorError(SourceError):
    """The Redis MONITOR tap failed."""


class MonitorPermissionError(MonitorError):
    """The configured Redis user is not allowed to run MONITOR."""


class PublishError(HotkeydError):
    """Publishing notifications or the snapshot to Redis failed."""


class UnreachableError(HotkeydError, ConnectionError):
    """A server (Redis, Kafka) could not be reached."""


class ClientError(HotkeydError):
    """The client SDK failed or was misused."""


# The app-side install (`pip install hotkeyd`) has redis and mmh3 only: a name whose module
# needs an extra (prometheus-client: `hotkeyd[metrics]`) is imported on first use, through
# a package's PEP 562 ``__getattr__``, and a missing extra is one error naming it.
def import_extra(module: str, name: str, extra: str) -> Any:
    """``from module import name``, or a ModuleNotFoundError that says which extra to add."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith("hotkeyd"):
            raise
        raise ModuleNotFoundError(
            f"{name} needs {exc.name}: pip install 'hotkeyd[{extra}]'", name=exc.name
        ) from exc
    return getattr(mod, name)
