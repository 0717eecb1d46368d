"""Kafka connection settings: ``kafka://`` URLs and keyword arguments for kafka-python.

One place turns what an operator types (a URL, environment variables) into the keyword
arguments of ``KafkaConsumer``/``KafkaProducer``, so the source, the dead-letter producer
and the reporter SDK agree on security settings and nobody re-parses URLs.

URL shape::

    kafka://[user:password@]host:9092[,host2:9092]/topic1,topic2?group=hotkeyd&format=reporter
    kafkas://... or kafka+ssl://...   # TLS (SSL, or SASL_SSL with a user)

Query parameters (all optional):

=====================  =====================================================================
``group``              consumer group id (default ``hotkeyd``); daemons in one group share
                       the partitions
``format``             ``reporter`` (default: lines or JSON, dispatched on the first byte),
                       ``key``, ``raw``, ``lines``, ``json``; ``auto`` = ``reporter``
``start``              ``latest`` (default) or ``earliest`` (replay history) for partitions
                       the group has no committed offset for
``dlq``                dead-letter topic for bad records (off by default)
``scale``              (alias ``rate_multiplier``) multiply rates by this when producers do not
                       partition by key and N daemons each see 1/N of every key
``client_id``          Kafka client id
``security_protocol``  PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
``sasl_mechanism``     PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
``sasl_username``      also from the URL's user part or ``HOTKEYD_KAFKA_SASL_USERNAME``
``sasl_password``      also from the URL or ``HOTKEYD_KAFKA_SASL_PASSWORD`` (prefer the env var:
                       URLs end up in process lists and logs)
``ssl_cafile``         CA bundle (PEM)
``ssl_certfile``       client certificate (PEM), for mutual TLS
``ssl_keyfile``        client private key (PEM)
``ssl_password``       password of the key file, or ``HOTKEYD_KAFKA_SSL_PASSWORD``
``*_password_file``    ``sasl_password_file``, ``ssl_password_file``: that password, read from a
                       file (kept out of the URL and the command line)
``ssl_check_hostname`` ``true`` (default) or ``false``
``session_timeout_ms`` / ``heartbeat_interval_ms`` / ``max_poll_interval_ms`` /
``max_poll_records``   consumer group tuning (defaults 6000 / 1000 / 300000 / 2000)
``group_instance_id``  static membership: a member restarted under the same id within
                       ``session_timeout_ms`` gets its partitions back without a rebalance
                       (a crashed one is replaced only after the session timeout)
=====================  =====================================================================
"""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from hotkeyd.conn.secrets import read_secret_file
from hotkeyd.conn.urls import redact_url
from hotkeyd.errors import ConfigError

__all__ = ["FORMATS", "KafkaSettings", "check_reachable", "kafka_python", "parse_kafka_url"]

FORMATS = ("reporter", "key", "raw", "lines", "json")
_FORMAT_ALIASES = {"auto": "reporter"}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_INT_PARAMS = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "max_poll_records",
)
_STR_PARAMS = (
    "client_id",
    "group_instance_id",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
)
_SECRET_FILES = {"sasl_password_file": "sasl_password", "ssl_password_file": "ssl_password"}
_KNOWN = {
    *_SECRET_FILES,
    "group",
    "format",
    "start",
    "dlq",
    "scale",
    "rate_multiplier",
    "security_protocol",
    "sasl_mechanism",
    "ssl_check_hostname",
    *_INT_PARAMS,
    *_STR_PARAMS,
}


@dataclass(frozen=True)
class KafkaSettings:
    """Everything the Kafka source needs to connect and decode.

    Secrets are kept out of ``repr`` so that logging the settings is safe.
    """

    bootstrap: tuple[str, ...]
    topics: tuple[str, ...]
    group: str = "hotkeyd"
    format: str = "reporter"
    start: str = "latest"
    dlq_topic: str | None = None
    scale: float = 1.0
    client_id: str = "hotkeyd"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    # Failover: a crashed member's partitions move after session_timeout_ms (6 s, the
    # brokers' default group.min.session.timeout.ms) plus a rebalance; heartbeats every
    # second keep a live member from being mistaken for a dead one under load.
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    group_instance_id: str | None = None  # static membership (KIP-345)
    max_poll_interval_ms: int = 300_000
    max_poll_records: int = 2_000

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ConfigError("kafka: no bootstrap server given (kafka://host:9092/topic)")
        if not self.topics:
            raise ConfigError("kafka: no topic given (kafka://host:9092/topic1,topic2)")
        if self.format not in FORMATS:
            raise ConfigError(
                f"kafka: unknown format {self.format!r} (one of {', '.join(FORMATS)})"
            )
        if self.start not in ("latest", "earliest"):
            raise ConfigError(f"kafka: start must be latest or earliest, not {self.start!r}")
        if not self.group:
            raise ConfigError("kafka: group must not be empty")
        if not (self.scale > 0):
            raise ConfigError(f"kafka: scale must be > 0, not {self.scale}")
        if self.security_protocol not in _PROTOCOLS:
            raise ConfigError(
                f"kafka: security_protocol {self.security_protocol!r} is not one of {', '.join(_PROTOCOLS)}"
            )
        if self.sasl_mechanism is not None and self.sasl_mechanism not in _MECHANISMS:
            raise ConfigError(
                f"kafka: sasl_mechanism {self.sasl_mechanism!r} is not one of {', '.join(_MECHANISMS)}"
            )
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_username and self.sasl_password
        ):
            raise ConfigError(
                f"kafka: {self.security_protocol} needs sasl_username and sasl_password"
            )
        if self.max_poll_records < 1:
            raise ConfigError("kafka: max_poll_records must be >= 1")

    def with_options(self, **changes: Any) -> KafkaSettings:
        """Return a copy with some fields changed (validated again); for CLI overrides."""
        try:
            return replace(self, **changes)
        except TypeError as exc:
            raise ConfigError(f"kafka: {exc}") from exc

    def security_kwargs(self) -> dict[str, Any]:
        """kafka-python keyword arguments for TLS and SASL, shared by consumer and producers."""
        kw: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL"):
            kw["sasl_mechanism"] = self.sasl_mechanism or "PLAIN"
            kw["sasl_plain_username"] = self.sasl_username
            kw["sasl_plain_password"] = self.sasl_password
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kw["ssl_check_hostname"] = self.ssl_check_hostname
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
                value = getattr(self, name)
                if value is not None:
                    kw[name] = value
        return kw

    def consumer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``KafkaConsumer``: a group member with manual commits."""
        kw = {
            "bootstrap_servers": list(self.bootstrap),
            "group_id": self.group,
            "client_id": self.client_id,
            "enable_auto_commit": False,  # at-least-once: the service commits after counting
            "auto_offset_reset": self.start,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            "max_poll_records": self.max_poll_records,
            **({"group_instance_id": self.group_instance_id} if self.group_instance_id else {}),
            "fetch_max_wait_ms": 100,
            "retry_backoff_ms": 200,
            "reconnect_backoff_ms": 200,
            "reconnect_backoff_max_ms": 5_000,
        }
        kw.update(self.security_kwargs())
        return kw

    def producer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a ``KafkaProducer`` on the same cluster (dead-letter topic)."""
        kw: dict[str, Any] = {
            "bootstrap_servers": list(self.bootstrap),
            "client_id": f"{self.client_id}-dlq",
            "reconnect_backoff_ms": 200,
            "reconnect_backoff_max_ms": 5_000,
        }
        kw.update(self.security_kwargs())
        return kw

    def describe(self) -> str:
        """A one-line, secret-free description for logs."""
        auth = (
            f" sasl={self.sasl_mechanism or 'PLAIN'} user={self.sasl_username}"
            if self.sasl_username
            else ""
        )
        return (
            f"kafka {','.join(self.bootstrap)} topics={','.join(self.topics)} group={self.group} "
            f"format={self.format} start={self.start} {self.security_protocol}{auth}"
        )


def check_reachable(bootstrap: Iterable[str], timeout: float = 1.0) -> None:
    """Raise ConnectionError unless some bootstrap server accepts a TCP connection."""
    errors = []
    for server in bootstrap:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            errors.append(f"{server}: {exc}")
    raise ConnectionError("no bootstrap server reachable (" + "; ".join(errors) + ")")


def kafka_python() -> ModuleType:
    """Import kafka-python (lazily: only Kafka users pay for it).

    kafka-python 3.0 calls the deprecated ``importlib.resources.read_text``/``open_text``
    while importing; under ``-W error`` (or pytest's ``filterwarnings = error``) that would
    make the import itself fail, in whatever thread first touches Kafka. Only that warning
    is silenced, only during the import.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="(read|open)_text is deprecated", category=DeprecationWarning
        )
        try:
            import kafka
            import kafka.structs
        except ModuleNotFoundError as exc:
            if exc.name != "kafka":
                raise
            raise ModuleNotFoundError(
                "Kafka needs kafka-python: pip install 'hotkeyd[kafka]' (an app's Reporter) "
                "or 'hotkeyd[daemon]'",
                name=exc.name,
            ) from exc

    return kafka


def _parse_bool(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"kafka: {name} must be true or false, not {value!r}")


def parse_kafka_url(url: str, *, env: Mapping[str, str] | None = None) -> KafkaSettings:
    """Parse ``kafka://[user:pass@]host:port[,host:port]/topic[,topic]?option=value...``.

    Args:
        url: the source URL; see the module docstring for the options.
        env: environment for secret fallbacks (``HOTKEYD_KAFKA_SASL_USERNAME``,
            ``HOTKEYD_KAFKA_SASL_PASSWORD``, ``HOTKEYD_KAFKA_SSL_PASSWORD``); ``os.environ``
            by default.

    Raises:
        ConfigError: with one line naming what is wrong.
    """
    env = os.environ if env is None else env
    if not isinstance(url, str):
        raise ConfigError(f"kafka: URL must be a string, not {type(url).__name__}")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise ConfigError(f"kafka: cannot parse URL: {exc}") from exc
    if parts.scheme not in ("kafka", "kafkas", "kafka+ssl"):
        raise ConfigError(
            f"kafka: URL must start with kafka:// or kafkas:// (TLS), got {redact_url(url)!r}"
        )
    netloc = parts.netloc
    userinfo = ""
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
    bootstrap: list[str] = []
    for host in netloc.split(","):
        host = host.strip()
        if not host:
            continue
        name, sep, port = host.rpartition(":")
        if not sep:
            name, port = host, "9092"
        if not name or not port.isdigit() or not (0 < int(port) < 65536):
            raise ConfigError(f"kafka: bad bootstrap server {host!r} (want host:port)")
        bootstrap.append(f"{name}:{port}")
    if not bootstrap:
        raise ConfigError("kafka: URL has no host (kafka://host:9092/topic)")
    topics = tuple(unquote(t).strip() for t in parts.path.strip("/").split(",") if t.strip())
    for t in topics:
        if "/" in t or " " in t:
            raise ConfigError(f"kafka: bad topic name {t!r}")
    opts: dict[str, str] = {}
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        # names only: a value (or a mistyped segment) may be a password
        shown = "&".join(
            f"{seg.partition('=')[0][:40]}=..." if "=" in seg else "<no '='>"
            for seg in parts.query.split("&")
        )
        raise ConfigError(f"kafka: bad query string {shown!r} (want name=value&...)") from None
    for k, v in pairs:
        if k not in _KNOWN:
            raise ConfigError(f"kafka: unknown option {k!r} (known: {', '.join(sorted(_KNOWN))})")
        opts[k] = v

    kw: dict[str, Any] = {"bootstrap": tuple(bootstrap), "topics": topics}
    if "group" in opts:
        kw["group"] = opts["group"]
    if "format" in opts:
        fmt = opts["format"].lower()
        kw["format"] = _FORMAT_ALIASES.get(fmt, fmt)
    if "start" in opts:
        kw["start"] = opts["start"].lower()
    if opts.get("dlq"):
        kw["dlq_topic"] = opts["dlq"]
    if "rate_multiplier" in opts:
        opts.setdefault("scale", opts["rate_multiplier"])
    if "scale" in opts:
        try:
            kw["scale"] = float(opts["scale"])
        except ValueError:
            raise ConfigError(f"kafka: scale must be a number, not {opts['scale']!r}") from None
    for name in _INT_PARAMS:
        if name in opts:
            try:
                kw[name] = int(opts[name])
            except ValueError:
                raise ConfigError(f"kafka: {name} must be an integer, not {opts[name]!r}") from None
    for name in _STR_PARAMS:
        if opts.get(name):
            kw[name] = opts[name]
    for file_opt, name in _SECRET_FILES.items():
        if opts.get(file_opt):
            if name in kw:
                raise ConfigError(f"kafka: give {name} or {file_opt}, not both")
            kw[name] = read_secret_file(os.path.expanduser(opts[file_opt]), f"kafka {name}")
    if "ssl_check_hostname" in opts:
        kw["ssl_check_hostname"] = _parse_bool("ssl_check_hostname", opts["ssl_check_hostname"])

    if userinfo:
        user, _, password = userinfo.partition(":")
        kw.setdefault("sasl_username", unquote(user))
        if password:
            kw.setdefault("sasl_password", unquote(password))
    if "sasl_username" not in kw and env.get("HOTKEYD_KAFKA_SASL_USERNAME"):
        kw["sasl_username"] = env["HOTKEYD_KAFKA_SASL_USERNAME"]
    if "sasl_password" not in kw and env.get("HOTKEYD_KAFKA_SASL_PASSWORD"):
        kw["sasl_password"] = env["HOTKEYD_KAFKA_SASL_PASSWORD"]
    if "ssl_password" not in kw and env.get("HOTKEYD_KAFKA_SSL_PASSWORD"):
        kw["ssl_password"] = env["HOTKEYD_KAFKA_SSL_PASSWORD"]

    tls = parts.scheme in ("kafkas", "kafka+ssl") or any(k.startswith("ssl_") for k in opts)
    sasl = "sasl_username" in kw or "sasl_mechanism" in opts
    default_protocol = (
        ("SASL_SSL" if tls else "SASL_PLAINTEXT") if sasl else ("SSL" if tls else "PLAINTEXT")
    )
    kw["security_protocol"] = opts.get("security_protocol", default_protocol).upper()
    if "sasl_mechanism" in opts:
        kw["sasl_mechanism"] = opts["sasl_mechanism"].upper()
    return KafkaSettings(**kw)
