"""hotkeyd: find hot Redis keys within a fraction of a second and tell every app."""

from __future__ import annotations

from hotkeyd.errors import (
    ClientError,
    ConfigError,
    DuplicateCompletionError,
    HotkeydError,
    IdempotencyError,
    IdempotencyInProgress,
    IdempotencyKeyError,
    IdempotencyMismatch,
    IdempotencyUnavailable,
    KafkaSourceError,
    LeaseLostError,
    MonitorError,
    MonitorPermissionError,
    PublishError,
    RulesError,
    SerializationError,
    SketchError,
    SourceError,
    UnreachableError,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hotkeyd")  # built from VERSION at the repository root
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


__version__ = _version()

__all__ = [
    "ClientError",
    "ConfigError",
    "DuplicateCompletionError",
    "HotkeydError",
    "IdempotencyError",
    "IdempotencyInProgress",
    "IdempotencyKeyError",
    "IdempotencyMismatch",
    "IdempotencyUnavailable",
    "KafkaSourceError",
    "LeaseLostError",
    "MonitorError",
    "MonitorPermissionError",
    "PublishError",
    "RulesError",
    "SerializationError",
    "SketchError",
    "SourceError",
    "UnreachableError",
    "__version__",
]
