"""A minimal RESP2 connection for the MONITOR tap, and its URL.

Why not redis-py: its ``Monitor`` joins arguments with spaces (keys with spaces
become ambiguous) and drains far fewer lines per second than the server produces under
load (docs/monitor.md has the measurements). The tap needs the raw byte stream after
``MONITOR`` to hand whole buffers to the C parser, so it speaks RESP itself: a few
commands at connect (AUTH, COMMAND INFO, CLIENT ID, CLUSTER NODES, CLIENT LIST,
RESET), then raw reads.

URL form (documented in docs/monitor.md)::

    redis-monitor://[user:pass@]host:6379[?cluster=auto|yes|no]
    redis-monitor+tls://...     TLS (alias rediss-monitor://); ssl_* options as rediss://
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hotkeyd.conn.redis import RedisSettings, parse_redis_url
from hotkeyd.conn.urls import redact_url
from hotkeyd.errors import ConfigError, MonitorError, MonitorPermissionError, UnreachableError

__all__ = [
    "MonitorTarget",
    "RespConnection",
    "RespError",
    "Unreachable",
    "authenticate",
    "encode_command",
    "is_perm",
    "not_ready",
    "parse_cluster_nodes",
    "parse_monitor_url",
    "perm_error",
    "unreachable",
]

_SCHEMES = {"redis-monitor": "redis", "redis-monitor+tls": "rediss", "rediss-monitor": "rediss"}
_CLUSTER = ("auto", "yes", "no")


@dataclass(frozen=True)
class MonitorTarget:
    """One ``--source redis-monitor://`` URL, validated."""

    redis: RedisSettings
    cluster: str = "auto"  # auto: ask CLUSTER NODES; yes: must be a cluster; no: tap this node
    display: str = ""

    def with_node(self, host: str, port: int) -> MonitorTarget:
        """The same credentials and TLS options for another node (cluster primaries)."""
        from dataclasses import replace

        scheme = "redis-monitor+tls" if self.redis.tls else "redis-monitor"
        return MonitorTarget(
            redis=replace(self.redis, host=host, port=port),
            cluster="no",
            display=f"{scheme}://{host}:{port}",
        )


def parse_monitor_url(url: str) -> MonitorTarget:
    """Validate a MONITOR source URL.

    Raises:
        ConfigError: one line naming what is wrong (password masked).
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"invalid MONITOR URL {url!r}: expected redis-monitor://host:port")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise ConfigError(f"invalid MONITOR URL {redact_url(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"invalid MONITOR URL {redact_url(url)!r}: scheme must be redis-monitor:// "
            f"or redis-monitor+tls://, got {scheme!r}"
        )
    if parts.path.strip("/"):
        raise ConfigError(
            f"invalid MONITOR URL {redact_url(url)!r}: no /db path (MONITOR sees every db)"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    cluster = "auto"
    rest = []
    for k, v in query:
        if k == "cluster":
            if v.lower() not in _CLUSTER:
                raise ConfigError(
                    f"invalid MONITOR URL {redact_url(url)!r}: cluster must be auto, yes or no, "
                    f"got {v!r}"
                )
            cluster = v.lower()
        elif k == "db":
            raise ConfigError(f"invalid MONITOR URL {redact_url(url)!r}: no db option")
        else:
            rest.append((k, v))
    inner = urlunsplit((_SCHEMES[scheme], parts.netloc, "", urlencode(rest), ""))
    try:
        settings = parse_redis_url(inner)
    except ConfigError as exc:
        msg = str(exc).replace(redact_url(inner), redact_url(url))
        raise ConfigError(msg.replace("rediss://", "redis-monitor+tls://")) from None
    return MonitorTarget(redis=settings, cluster=cluster, display=redact_url(url))


class RespError(MonitorError):
    """The server answered ``-ERR ...`` (the message without the dash)."""


class _Incomplete(MonitorError):
    """Not a whole reply in the buffer yet (internal: read more and parse again)."""


def _parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """Parse one RESP2 value at ``pos``; raise _Incomplete when more bytes are needed."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        raise _Incomplete
    kind, line = buf[pos : pos + 1], bytes(buf[pos + 1 : nl])
    pos = nl + 2
    if kind == b"+":
        return line, pos
    if kind == b"-":
        return RespError(line.decode("utf-8", "replace")), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + n]), pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            item, pos = _parse(buf, pos)
            items.append(item)
        return items, pos
    raise RespError(f"protocol error: unexpected reply type {kind!r}")


def encode_command(*args: bytes | str | int) -> bytes:
    """RESP2 array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class RespConnection:
    """One blocking TCP (or TLS) connection speaking RESP2.

    Args:
        settings: host, port, credentials and TLS options.
        timeout: connect and per-read timeout in seconds.
    """

    def __init__(self, settings: RedisSettings, timeout: float) -> None:
        self.settings = settings
        self._buf = bytearray()
        raw = socket.create_connection((settings.host, settings.port), timeout=timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            if settings.tls:
                raw = _tls_context(settings).wrap_socket(raw, server_hostname=settings.host)
        except BaseException:
            raw.close()
            raise
        self.sock: socket.socket = raw
        self.sock.settimeout(timeout)

    @property
    def local_addr(self) -> str:
        """``ip:port`` as Redis prints it in MONITOR lines (IPv6 in brackets)."""
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def call(self, *args: bytes | str | int) -> Any:
        """Send one command and return its reply; ``-ERR`` raises :class:`RespError`."""
        self.sock.sendall(encode_command(*args))
        reply = self.read_reply()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def read_reply(self) -> Any:
        while True:
            if self._buf:
                try:
                    value, pos = _parse(self._buf, 0)
                except _Incomplete:
                    pass
                else:
                    del self._buf[:pos]
                    return value
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self._buf += chunk

    def take_buffered(self) -> bytes:
        """Bytes read past the last reply (the start of a MONITOR stream)."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def send(self, *args: bytes | str | int) -> None:
        self.sock.sendall(encode_command(*args))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _tls_context(s: RedisSettings) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=s.ssl_ca_certs)
    if s.ssl_certfile:
        ctx.load_cert_chain(s.ssl_certfile, s.ssl_keyfile)
    if s.ssl_cert_reqs == "none":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = s.ssl_check_hostname
        ctx.verify_mode = ssl.CERT_OPTIONAL if s.ssl_cert_reqs == "optional" else ssl.CERT_REQUIRED
    return ctx


def parse_cluster_nodes(text: bytes | str, seed_host: str) -> list[tuple[str, int]]:
    """Primaries (host, port) from a ``CLUSTER NODES`` reply, failed ones left out.

    Each line is ``<id> <ip:port@cport[,hostname]> <flags> <master> ...``; a node
    that does not know its own address (``:0``) is the one we asked: ``seed_host``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    nodes: list[tuple[str, int]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        flags = set(fields[2].split(","))
        if "master" not in flags or flags & {"fail", "noaddr", "handshake", "fail?"}:
            continue
        addr = fields[1].split("@", 1)[0].split(",", 1)[0]
        host, _, port = addr.rpartition(":")
        if not port.isdigit() or int(port) == 0:
            continue
        host = host.strip("[]") or seed_host
        nodes.append((host, int(port)))
    return sorted(set(nodes))


# ------------------------------------------------------------------ errors
# error replies of a server that is up but not ready yet: retrying fixes them
_NOT_READY = ("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN")


class Unreachable(MonitorError, UnreachableError):
    """A failure to connect that retrying can fix: refused, timeout, DNS, reset, loading.

    Both a :class:`MonitorError` and an :class:`UnreachableError`, so ``except
    UnreachableError`` sees a MONITOR outage like any other.

    Kept apart from the fatal start failures (bad password, NOPERM, TLS certificate
    verification) so that one server being down does not stop the other taps: the
    source logs and counts it and the tap keeps retrying in the background.
    """


def perm_error(target: MonitorTarget, what: str, exc: Exception) -> MonitorPermissionError:
    user = target.redis.username or "default"
    return MonitorPermissionError(
        f"Redis user {user!r} on {target.display} may not run {what.upper().replace('|', ' ')} "
        f"({exc}); grant it with: ACL SETUSER {user} +{what.lower()}"
    )


def unreachable(target: MonitorTarget, exc: OSError) -> MonitorError:
    """The error for a socket failure: :class:`Unreachable` unless retrying cannot help.

    A TLS failure other than an EOF mid-handshake (certificate verification, protocol
    mismatch) is configuration, not an outage, so it stays a fatal ``MonitorError``.
    """
    if isinstance(exc, Unreachable):
        return exc
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError):
        return MonitorError(f"TLS handshake with {target.display} failed: {exc}")
    return Unreachable(f"cannot reach {target.display}: {exc}")


def not_ready(exc: Exception) -> bool:
    """True for ``-LOADING`` and the like: the server is up but cannot serve yet."""
    return str(exc).startswith(_NOT_READY)


def is_perm(exc: Exception) -> bool:
    return str(exc).startswith("NOPERM")


def authenticate(conn: RespConnection, target: MonitorTarget) -> None:
    """AUTH on ``conn`` with ``target``'s credentials (nothing when it has no password).

    Raises:
        MonitorError: the server rejected the credentials.
    """
    r = target.redis
    if r.password is None:
        return
    args = ("AUTH", r.username, r.password) if r.username else ("AUTH", r.password)
    try:
        conn.call(*args)
    except RespError as exc:
        raise MonitorError(
            f"authentication as {r.username or 'default'!r} failed on {target.display}: {exc}"
        ) from None
