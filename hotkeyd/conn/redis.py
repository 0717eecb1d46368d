"""Redis connection URLs -> redis-py clients, and redis-py errors -> hotkeyd errors.

hotkeyd talks to Redis from several places (publisher, snapshot reader, MONITOR tap,
client SDK). All of them take one URL and go through :func:`parse_redis_url`, so a typo
is caught once, at start-up, with one readable line instead of a redis-py traceback
on the first publish. Supported forms::

    redis://[[user]:password@]host[:port][/db][?option=value...]
    rediss://...                       TLS; verify with ssl_ca_certs=/path/ca.pem
    unix:///path/to/redis.sock[?db=N]

Query options: ``db``, ``socket_timeout``, ``socket_connect_timeout``,
``client_name``, ``password_file`` (the password, read from a file, so it is in neither
the command line nor the URL: :mod:`hotkeyd.conn.secrets`), ``cluster`` (``auto``: ask the node whether it is in a Redis Cluster;
``yes``/``no``: do not ask; see :mod:`hotkeyd.conn.cluster`), and for TLS ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_cert_reqs`` (none/optional/required), ``ssl_check_hostname`` (true/false).
Unknown options are an error: a silently ignored ``ssl_ca_cert=`` typo would mean
an unverified connection.

redis-py retries are switched off (``Retry(NoBackoff(), 0)``): the publisher has its
own capped, jittered backoff and must notice a restart to republish its full state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from hotkeyd.conn.secrets import read_secret_file
from hotkeyd.conn.urls import redact_url
from hotkeyd.errors import ConfigError, HotkeydError, PublishError, UnreachableError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_SOCKET_TIMEOUT",
    "REDIS_ERRORS",
    "RedisSettings",
    "check_redis",
    "client_from_url",
    "cluster_client",
    "cluster_enabled",
    "connect",
    "open_client",
    "parse_redis_url",
    "translate_redis_error",
]

REDIS_ERRORS = (rexc.RedisError, rexc.RedisClusterException, OSError)
"""What a Redis call may raise (``RedisClusterException`` is not a ``RedisError``)."""

DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_SOCKET_TIMEOUT = 2.0
_MAX_DB = 1 << 20  # Redis allows `databases` up to INT_MAX; anything this big is a typo

_BOOL = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}
_CERT_REQS = ("none", "optional", "required")
_CLUSTER_MODES = ("auto", "yes", "no")
_QUERY_OPTIONS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "client_name",
        "cluster",
        "password_file",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
    }
)
_TLS_OPTIONS = frozenset(o for o in _QUERY_OPTIONS if o.startswith("ssl_"))


@dataclass(frozen=True)
class RedisSettings:
    """A validated Redis connection description (what a URL says).

    ``password`` is kept out of ``repr`` so settings can be logged.
    """

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    unix_path: str | None = None
    tls: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cert_reqs: str = "required"
    ssl_check_hostname: bool = True
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT
    socket_connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    client_name: str | None = None
    cluster: str = "auto"  # auto | yes | no
    display: str = ""  # the URL with the password masked, for messages

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis(...)``."""
        kw: dict[str, Any] = {
            "db": self.db,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_connect_timeout,
            "client_name": self.client_name,
            "retry": Retry(NoBackoff(), 0),
        }
        if self.unix_path is not None:
            kw["unix_socket_path"] = self.unix_path
            return kw
        kw.update(host=self.host, port=self.port)
        if self.tls:
            kw.update(
                ssl=True,
                ssl_ca_certs=self.ssl_ca_certs,
                ssl_certfile=self.ssl_certfile,
                ssl_keyfile=self.ssl_keyfile,
                ssl_cert_reqs=self.ssl_cert_reqs,
                ssl_check_hostname=self.ssl_check_hostname and self.ssl_cert_reqs != "none",
            )
        return kw


def _bad(url: str, why: str) -> ConfigError:
    return ConfigError(f"invalid Redis URL {redact_url(url)!r}: {why}")


def _number(url: str, name: str, raw: str, *, lo: float, hi: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _bad(url, f"{name} must be a number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise _bad(url, f"{name} must be between {lo:g} and {hi:g}, got {raw!r}")
    return value


def _parse_db(url: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) >= _MAX_DB:
        raise _bad(url, f"database index must be a non-negative integer, got {raw!r}")
    return int(raw)


def parse_redis_url(url: str) -> RedisSettings:
    """Validate a Redis URL and return its settings.

    Raises:
        ConfigError: with one line naming what is wrong (password masked).
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("invalid Redis URL: empty (expected redis://host:port/db)")
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        why = str(exc)
        if "port" in why.lower():
            why = f"port must be a number in 1-65535 ({why})"
        raise _bad(url, why) from None
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", "unix"):
        raise _bad(url, f"scheme must be redis://, rediss:// or unix://, got {scheme or 'none'!r}")
    if parts.fragment:
        raise _bad(url, "unexpected '#' fragment")

    opts: dict[str, str] = {}
    query = parse_qs(parts.query, keep_blank_values=True)
    for name, values in query.items():
        if name not in _QUERY_OPTIONS:
            known = ", ".join(sorted(_QUERY_OPTIONS))
            raise _bad(url, f"unknown option {name!r} (known: {known})")
        if len(values) != 1:
            raise _bad(url, f"option {name!r} given more than once")
        opts[name] = values[0]

    kw: dict[str, Any] = {"display": redact_url(url)}
    if parts.username:
        kw["username"] = unquote(parts.username)
    if parts.password is not None:
        kw["password"] = unquote(parts.password)
    if "password_file" in opts:
        if "password" in kw:
            raise _bad(url, "give the password in the URL or in password_file, not both")
        kw["password"] = read_secret_file(os.path.expanduser(opts["password_file"]), "password")

    tls = scheme == "rediss"
    if scheme == "unix":
        path = unquote(parts.path)
        if not path:
            raise _bad(url, "unix:// needs a socket path, e.g. unix:///run/redis.sock")
        kw["unix_path"] = path
    else:
        host = parts.hostname
        if not host:
            raise _bad(url, "missing host (expected redis://host:port/db)")
        if port is not None and not 0 < port < 65536:
            raise _bad(url, f"port must be 1-65535, got {port}")
        kw.update(host=host, port=port or 6379, tls=tls)
        path = unquote(parts.path).strip("/")
        if path:
            kw["db"] = _parse_db(url, path)

    if "db" in opts:
        kw["db"] = _parse_db(url, opts["db"])
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name in opts:
            kw[name] = _number(url, name, opts[name], lo=0.001, hi=3600.0)
    if "client_name" in opts:
        kw["client_name"] = opts["client_name"] or None
    if "cluster" in opts:
        mode = opts["cluster"].lower()
        mode = {"true": "yes", "1": "yes", "false": "no", "0": "no"}.get(mode, mode)
        if mode not in _CLUSTER_MODES:
            raise _bad(url, f"cluster must be auto, yes or no, got {opts['cluster']!r}")
        kw["cluster"] = mode

    tls_opts = _TLS_OPTIONS & opts.keys()
    if tls_opts and not tls:
        raise _bad(url, f"{', '.join(sorted(tls_opts))} needs the rediss:// scheme")
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if name in opts:
            file = os.path.expanduser(opts[name])
            if not os.path.isfile(file):
                raise _bad(url, f"{name} file {file!r} does not exist")
            kw[name] = file
    if "ssl_keyfile" in kw and "ssl_certfile" not in kw:
        raise _bad(url, "ssl_keyfile given without ssl_certfile")
    if "ssl_cert_reqs" in opts:
        reqs = opts["ssl_cert_reqs"].lower()
        if reqs not in _CERT_REQS:
            raise _bad(url, f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}, got {reqs!r}")
        kw["ssl_cert_reqs"] = reqs
    if "ssl_check_hostname" in opts:
        flag = _BOOL.get(opts["ssl_check_hostname"].lower())
        if flag is None:
            raise _bad(
                url, f"ssl_check_hostname must be true or false, got {opts['ssl_check_hostname']!r}"
            )
        kw["ssl_check_hostname"] = flag
    return RedisSettings(**kw)


def client_from_url(url: str | RedisSettings, **overrides: Any) -> redis.Redis:
    """Build a redis-py client (no I/O yet: it connects on first command).

    Args:
        url: a Redis URL, or settings from :func:`parse_redis_url`.
        **overrides: extra ``redis.Redis`` keyword arguments (e.g. ``socket_timeout``).

    Raises:
        ConfigError: the URL is invalid.
    """
    settings = url if isinstance(url, RedisSettings) else parse_redis_url(url)
    kwargs = settings.client_kwargs()
    kwargs.update(overrides)
    return redis.Redis(**kwargs)


def cluster_enabled(client: redis.Redis) -> bool:
    """Ask one node whether it is part of a cluster (``INFO cluster``).

    A user without INFO rights gets False: say ``?cluster=yes`` in the URL then.
    """
    try:
        info = client.info("cluster")
    except rexc.ResponseError:
        return False
    return bool(int(info.get("cluster_enabled", 0) or 0))


def cluster_client(settings: RedisSettings, **overrides: Any) -> RedisCluster:
    """A ``RedisCluster`` seeded with the node ``settings`` names (connects now).

    Raises:
        ConfigError: the URL names a db other than 0 or a unix socket.
    """
    if settings.unix_path is not None:
        raise ConfigError(f"{settings.display}: a Redis Cluster is reached over TCP, not unix://")
    if settings.db != 0:
        raise ConfigError(
            f"{settings.display}: a Redis Cluster has only db 0, got db {settings.db}"
        )
    kw = settings.client_kwargs()
    # A cluster client follows MOVED/ASK and refreshes its slot map by retrying, so
    # its own retry policy stays; the db is always 0.
    for name in ("db", "retry", "unix_socket_path"):
        kw.pop(name, None)
    kw.update(overrides)
    return RedisCluster(**kw)


def open_client(url: str | RedisSettings, **overrides: Any) -> redis.Redis | RedisCluster:
    """A client for ``url``: ``RedisCluster`` when the node is in a cluster (I/O now).

    With ``?cluster=auto`` (the default) the node is asked ``INFO cluster``; with
    ``yes``/``no`` it is not.

    Raises:
        ConfigError: the URL is invalid.
        redis.RedisError, OSError: the node could not be asked (translate at the caller).
    """
    settings = url if isinstance(url, RedisSettings) else parse_redis_url(url)
    if settings.cluster == "yes":
        return cluster_client(settings, **overrides)
    client = client_from_url(settings, **overrides)
    if settings.cluster == "no" or settings.unix_path is not None:
        return client
    try:
        enabled = cluster_enabled(client)
    except BaseException:
        client.close()
        raise
    if not enabled:
        return client
    client.close()
    return cluster_client(settings, **overrides)


def _target(where: str | RedisSettings | None) -> str:
    if isinstance(where, RedisSettings):
        return where.display or f"{where.host}:{where.port}"
    return redact_url(where) if where else ""


def translate_redis_error(
    exc: BaseException, where: str | RedisSettings | None = None
) -> HotkeydError:
    """Turn a redis-py (or socket/TLS) error into a hotkeyd error with one clear line.

    Authentication and permission problems become :class:`PublishError` (retrying
    will not help, the operator must fix credentials); connection problems become
    :class:`UnreachableError`. Use as ``raise translate_redis_error(e, url) from e``.
    """
    target = _target(where)
    at = f" at {target}" if target else ""
    if isinstance(exc, HotkeydError):
        return exc
    if isinstance(exc, rexc.AuthenticationError):
        return PublishError(f"Redis authentication failed{at}: {exc} (check user/password)")
    if isinstance(exc, (rexc.AuthorizationError, rexc.NoPermissionError)):
        return PublishError(f"Redis user lacks permission{at}: {exc} (check the ACL)")
    if isinstance(exc, rexc.ResponseError) and str(exc).startswith(
        ("NOAUTH", "WRONGPASS", "NOPERM")
    ):
        return PublishError(f"Redis refused credentials{at}: {exc}")
    if isinstance(exc, (rexc.MovedError, rexc.AskError)):
        return PublishError(
            f"Redis{at} is a Redis Cluster node and this client is not cluster-aware "
            f"({type(exc).__name__}: {exc}); use a RedisCluster client or ?cluster=yes"
        )
    if isinstance(exc, (rexc.ClusterDownError, rexc.TryAgainError, rexc.RedisClusterException)):
        return UnreachableError(f"Redis Cluster{at} is not serving: {exc}")
    if isinstance(exc, (rexc.ConnectionError, rexc.TimeoutError, OSError)):
        return UnreachableError(f"Redis unreachable{at}: {exc}")
    if isinstance(exc, rexc.BusyLoadingError):
        return UnreachableError(f"Redis{at} is loading its dataset: {exc}")
    return PublishError(f"Redis error{at}: {type(exc).__name__}: {exc}")


def check_redis(
    url: str, *, timeout: float = DEFAULT_CONNECT_TIMEOUT, **overrides: Any
) -> Mapping[str, Any]:
    """Connect, authenticate and PING once; for ``hotkeyd check`` and start-up.

    Returns:
        ``INFO server`` fields (e.g. ``redis_version``) for a friendly message.

    Raises:
        ConfigError, UnreachableError, PublishError: with one readable line.
    """
    settings = parse_redis_url(url)
    client = client_from_url(
        settings, socket_timeout=timeout, socket_connect_timeout=timeout, **overrides
    )
    try:
        client.ping()
        try:
            info: Mapping[str, Any] = client.info("server")
        except rexc.ResponseError:  # an ACL user may PING/PUBLISH without INFO rights
            info = {}
        return info
    except (rexc.RedisError, OSError) as exc:
        raise translate_redis_error(exc, settings) from exc
    finally:
        client.close()


def connect(url: str, *, check: bool = True, **overrides: Any) -> redis.Redis | RedisCluster:
    """Return a client for ``url``, PINGed once so problems surface here as one line.

    For CLI commands (``hotkeyd top``, ``watch``, ``check``) and the client SDK, which
    want "cannot reach Redis" at once rather than on their first real command.

    Raises:
        ConfigError: the URL is invalid.
        UnreachableError: Redis cannot be reached.
        PublishError: authentication or ACL failure.
    """
    settings = parse_redis_url(url)
    try:
        client = open_client(settings, **overrides)
    except REDIS_ERRORS as exc:
        raise translate_redis_error(exc, settings) from exc
    if check:
        try:
            client.ping()
        except REDIS_ERRORS as exc:
            client.close()
            raise translate_redis_error(exc, settings) from exc
    return client
