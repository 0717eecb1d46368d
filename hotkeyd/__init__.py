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

__version__ = "0.1.0"

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
