"""Daemon settings: one frozen dataclass, validated once.

Precedence is flag > ``HOTKEYD_*`` environment variable > config file > default. The
CLI gets that order from click (command line, then ``envvar``, then ``default_map``,
which :func:`load_config_file` fills from the file); library users build
:class:`Settings` directly or with :meth:`Settings.from_mapping`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hotkeyd.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Settings", "load_config_file"]


@dataclass(frozen=True)
class Settings:
    """Everything ``hotkeyd run`` needs; see ``hotkeyd run --help`` for each option.

    Attributes mirror the CLI options one to one (``--max-hot`` is ``max_hot``).
    """

    sources: tuple[str, ...] = ("-",)
    input_format: str = "keys"  # keys | counted (stdin and files)
    follow: bool = False
    redis_url: str | None = None
    namespace: str = "hotkeyd"
    channel: str | None = None
    instance: str | None = None
    rules: str | None = None
    window: float = 1.0
    tick: float = 0.1
    hysteresis: float = 0.8
    max_hot: int = 1000
    k: int = 200
    memory: int = 1 << 20
    sketch: str = "heavykeeper"
    max_key_len: int = 1024
    http_host: str = "127.0.0.1"
    http_port: int | None = 9108  # None disables the HTTP endpoint
    heartbeat: float = 1.0
    shutdown_timeout: float = 5.0
    monitor_duty: float = 1.0
    log_level: str = "INFO"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def bad(name: str, why: str, value: Any) -> ConfigError:
            return ConfigError(f"{name}: {why}, got {value!r}")

        if not self.sources:
            raise ConfigError("sources: at least one source is required")
        if self.input_format not in ("keys", "counted"):
            raise bad("input_format", "must be 'keys' or 'counted'", self.input_format)
        if not self.window > 0:
            raise bad("window", "must be > 0 seconds", self.window)
        if not 0 < self.tick <= self.window:
            raise bad("tick", "must be > 0 and <= window", self.tick)
        if not 0 < self.hysteresis <= 1:
            raise bad("hysteresis", "must be in (0, 1]", self.hysteresis)
        if self.max_hot < 1:
            raise bad("max_hot", "must be >= 1", self.max_hot)
        if self.k < 1:
            raise bad("k", "must be >= 1", self.k)
        if self.memory < 4096:
            raise bad("memory", "must be >= 4096 bytes", self.memory)
        if self.sketch not in ("heavykeeper", "countmin"):
            raise bad("sketch", "must be 'heavykeeper' or 'countmin'", self.sketch)
        if not 1 <= self.max_key_len <= 1 << 20:
            raise bad("max_key_len", "must be in [1, 1048576]", self.max_key_len)
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise bad("http_port", "must be in [0, 65535]", self.http_port)
        if not self.heartbeat > 0:
            raise bad("heartbeat", "must be > 0 seconds", self.heartbeat)
        if not self.shutdown_timeout > 0:
            raise bad("shutdown_timeout", "must be > 0 seconds", self.shutdown_timeout)
        if not 0 < self.monitor_duty <= 1:
            raise bad("monitor_duty", "must be in (0, 1]", self.monitor_duty)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from a plain mapping (config file, tests); unknown keys are errors."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        kw = dict(values)
        if "sources" in kw and isinstance(kw["sources"], str):
            kw["sources"] = (kw["sources"],)
        if "sources" in kw:
            kw["sources"] = tuple(kw["sources"])
        return cls(**kw)


def load_config_file(path: str) -> dict[str, Any]:
    """Read a TOML config file into option names (dashes or underscores both accepted).

    The file may hold the settings at top level or under a ``[hotkeyd]`` table.
    """
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if isinstance(data.get("hotkeyd"), dict):
        data = data["hotkeyd"]
    return {str(k).replace("-", "_"): v for k, v in data.items()}
