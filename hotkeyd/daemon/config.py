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
from dataclasses import dataclass, field, fields
from typing import Any

from hotkeyd.conn.urls import redact_url
from hotkeyd.detector.config import DetectorConfig, same_setting
from hotkeyd.errors import ConfigError
from hotkeyd.sketch import process_seed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Settings", "load_config_file", "option"]


def option(
    default: Any,
    help: str,
    *,
    flags: tuple[str, ...] = (),
    env: str | None = None,
    choices: tuple[str, ...] | None = None,
    multiple: bool = False,
    kind: type | None = None,
) -> Any:
    """Declare a daemon setting once; the CLI derives its option from this.

    ``flags`` default to ``--<name-with-dashes>``, ``env`` to ``HOTKEYD_<NAME>``; ``kind``
    is the value's type where the default (None) does not say it.
    """
    meta = {
        "help": help,
        "flags": flags,
        "env": env,
        "choices": choices,
        "multiple": multiple,
        "kind": kind,
    }
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """Everything ``hotkeyd run`` needs; see ``hotkeyd run --help`` for each option.

    Attributes mirror the CLI options one to one (``--max-hot`` is ``max_hot``). The
    detector's settings (window ... max_key_len) are declared, with their bounds, once
    in :class:`~hotkeyd.detector.config.DetectorConfig`; :attr:`detector` builds it.
    """

    sources: tuple[str, ...] = option(
        ("-",),
        "Where key accesses come from; repeatable. '-' is stdin, a path is a file, "
        "kafka://host:9092/topic1,topic2?group=hotkeyd&format=lines is a Kafka consumer group, "
        "redis-monitor://[user:pass@]host:6379 taps a Redis server with MONITOR. "
        "In the env var, separate several sources with spaces.",
        flags=("--source", "-s"),
        env="SOURCE",
        multiple=True,
    )
    input_format: str = option(
        "keys",
        "stdin/file lines: one key per line, or 'key<TAB>count'.",
        choices=("keys", "counted"),
    )
    follow: bool = option(False, "Tail a growing file (tail -F).")
    redis_url: str | None = option(
        None,
        "Publish to Redis: redis://[user:pass@]host:6379/0 or rediss:// for TLS. "
        "Without it, events go to stdout as JSON lines.",
    )
    namespace: str = option("hotkeyd", "Prefix of every Redis name.")
    channel: str | None = option(None, "Events channel [default: <namespace>:events].")
    sharded_pubsub: bool = option(
        False,
        "SPUBLISH instead of PUBLISH (Redis >= 7): on a cluster only the channel's shard "
        "carries the messages. Applications must use Namespace(sharded=True).",
    )
    watch_url: tuple[str, ...] = option(
        (),
        "Data Redis whose hot keys the daemon watches (CLIENT TRACKING) to broadcast an "
        "invalidation of any write to them; repeatable; a cluster node means every primary "
        "[default: the --redis-url bus].",
        multiple=True,
    )
    watch: bool = option(True, "Watch the hot keys on the data Redis (--no-watch: off).")
    watch_rearm_budget: int = option(
        5000,
        "Re-arms per second the watch may cost each data Redis node. Past it, a hot key "
        "is re-armed at most every N / budget seconds, N the hot keys written in the last "
        "second (50-250 ms), and a write while its re-arm waits is dropped within that; "
        "0: no budget (50 ms).",
    )
    instance: str | None = option(None, "Instance id [default: host-pid-random].")
    auth_key_file: str | None = option(
        None,
        "Sign every message and snapshot with HMAC-SHA256 under the first key of this file "
        "(one key per line, >= 16 bytes). HOTKEYD_AUTH_KEY holds one key instead of a file.",
    )
    rules: str | None = option(None, "Rules TOML file (SIGHUP reloads).")
    window: float = same_setting("window")
    tick: float = same_setting("tick")
    hysteresis: float = same_setting("hysteresis")
    max_hot: int = same_setting("max_hot")
    k: int = same_setting("k")
    memory: int = same_setting("memory")
    sketch: str = same_setting("sketch")
    max_key_len: int = same_setting("max_key_len")
    max_lag: float = same_setting("max_lag")
    lag_alert: float = option(
        10.0, "/healthz reports 'degraded' while a source lags more than this, seconds."
    )
    history: bool = option(
        True, "Append hot/cool transitions to the capped stream {namespace}:history (with Redis)."
    )
    history_maxlen: int = option(10_000, "Most entries the history stream keeps.")
    history_max_age: float = option(4 * 86400.0, "Seconds the history stream keeps an entry.")
    http_host: str = option("127.0.0.1", "Bind address of /metrics, /healthz, /topk.")
    http_port: int | None = option(
        9108, "HTTP port; 0 picks a free one (--no-http: no endpoint)."
    )  # None disables the HTTP endpoint
    console: bool = option(
        True,
        "Serve the web console at / on the HTTP port (read-only). Off the loopback "
        "address it needs --console-token-file.",
    )
    console_token_file: str | None = option(
        None,
        "File whose first line is the console's token (>= 16 characters): Bearer, or Basic "
        "auth with it as the password ('user:password' in the file: that user too).",
    )
    demand_reports: bool = option(
        True,
        "Count the reads app caches served locally (demand reports on "
        "<namespace>:demand:<instance>; needs --redis-url), so a key stays hot while "
        "its total demand lasts.",
    )
    demand_key_file: str | None = option(
        None,
        "Read only demand reports signed with a reporter key of this file (one key per "
        "line, >= 16 bytes; not the --auth-key-file key: apps hold it); unsigned ones are "
        "dropped before parsing. HOTKEYD_DEMAND_KEY holds one key instead of a file.",
    )
    heartbeat: float = option(1.0, "Snapshot refresh interval, seconds.")
    shutdown_timeout: float = option(5.0, "Flush deadline on SIGTERM.")
    monitor_duty: float = option(1.0, "MONITOR duty cycle in (0, 1].")
    monitor_max_line: int = option(
        16 << 20,
        "Longest MONITOR line read (bytes); longer ones (a SET of a large value: MONITOR "
        "escapes binary 4x) are skipped and counted (too_long) in bounded memory.",
    )
    hash_seed: int | None = option(
        None,
        "Secret seed of the sketch hash, 0 to 2^64-1 [default: 64 random bits per process, "
        "from os.urandom]. Give it only to reproduce a run exactly (tests, replays); the "
        "environment variable keeps it out of the process list.",
        kind=int,
    )
    log_level: str = option(
        "INFO", "Log verbosity (logs go to stderr).", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )

    def __post_init__(self) -> None:
        def bad(name: str, why: str, value: Any) -> ConfigError:
            return ConfigError(f"{name}: {why}, got {value!r}")

        if not self.sources:
            raise ConfigError("sources: at least one source is required")
        if self.input_format not in ("keys", "counted"):
            raise bad("input_format", "must be 'keys' or 'counted'", self.input_format)
        if self.hash_seed is not None and not 0 <= self.hash_seed < 1 << 64:
            raise ConfigError("hash_seed: must be in [0, 2**64 - 1]")  # a secret: not echoed
        self.detector  # noqa: B018 - validates the detector settings
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise bad("http_port", "must be in [0, 65535]", self.http_port)
        if not self.heartbeat > 0:
            raise bad("heartbeat", "must be > 0 seconds", self.heartbeat)
        if not self.shutdown_timeout > 0:
            raise bad("shutdown_timeout", "must be > 0 seconds", self.shutdown_timeout)
        if not self.lag_alert > 0:
            raise bad("lag_alert", "must be > 0 seconds", self.lag_alert)
        if self.watch_rearm_budget < 0:
            raise bad(
                "watch_rearm_budget",
                "must be >= 0 re-arms/s (0: no budget)",
                self.watch_rearm_budget,
            )
        if self.history_maxlen < 1:
            raise bad("history_maxlen", "must be >= 1", self.history_maxlen)
        if not self.history_max_age > 0:
            raise bad("history_max_age", "must be > 0 seconds", self.history_max_age)
        if self.monitor_max_line < 1024:
            raise bad("monitor_max_line", "must be >= 1024 bytes", self.monitor_max_line)
        if not 0 < self.monitor_duty <= 1:
            raise bad("monitor_duty", "must be in (0, 1]", self.monitor_duty)
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise bad("log_level", "must be DEBUG, INFO, WARNING or ERROR", self.log_level)

    @property
    def detector(self) -> DetectorConfig:
        """The detector's part of these settings."""
        seed = process_seed() if self.hash_seed is None else self.hash_seed
        return DetectorConfig(
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name in _DETECTOR},
            seed=seed,
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from option values (CLI, config file, tests); unknown keys are errors.

        Besides the field names, ``source`` (the CLI's name for ``sources``) and
        ``no_http = true`` (``http_port = None``) are accepted.
        """
        kw = dict(values)
        if "source" in kw:
            kw["sources"] = kw.pop("source")
        if kw.pop("no_http", False):
            kw["http_port"] = None
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - names)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        if isinstance(kw.get("sources"), str):
            kw["sources"] = (kw["sources"],)
        if "sources" in kw:
            kw["sources"] = tuple(kw["sources"])
        if isinstance(kw.get("log_level"), str):
            kw["log_level"] = kw["log_level"].upper()
        return cls(**kw)

    def redacted(self) -> dict[str, Any]:
        """These settings as a JSON-ready dict, passwords in URLs masked (``--print-config``)."""
        shown = dataclasses.asdict(self)
        shown["sources"] = [redact_url(u) for u in self.sources]
        if self.redis_url:
            shown["redis_url"] = redact_url(self.redis_url)
        if self.hash_seed is not None:
            shown["hash_seed"] = "***"
        return shown


_DETECTOR = {f.name for f in fields(DetectorConfig)}


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
