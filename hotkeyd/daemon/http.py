"""The daemon's small HTTP endpoint: ``/metrics``, ``/healthz`` and ``/topk``.

Standard library only (``ThreadingHTTPServer`` in a daemon thread), so it adds no
dependency and cannot stall the detector: each request runs on its own thread and
only calls the callables it was given. It binds to 127.0.0.1 by default: metrics and
the hot-key list describe the application's traffic and are not for the network
unless an operator says so (``--http-host 0.0.0.0``).

* ``GET /metrics`` -- Prometheus text format of the given registry.
* ``GET /healthz`` -- ``200 {"status": "ok", ...}`` or ``503`` with ``reasons``.
* ``GET /topk``    -- the hot set and top keys by rate, as JSON; ``?n=`` limits top.
* ``GET /`` and the console's ``/static/``, ``/api/`` routes -- the web console
  (:mod:`hotkeyd.web`), when one is given; it checks Host and token itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from hotkeyd.errors import ConfigError, UnreachableError

if TYPE_CHECKING:
    from hotkeyd.web import Console

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "HealthFn", "HttpServer", "TopkFn"]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9108

HealthFn = Callable[[], "tuple[bool, dict[str, Any]] | bool | dict[str, Any]"]
"""Returns ``(healthy, details)``, or a bool, or a dict with ``"status": "ok"``."""
TopkFn = Callable[..., dict[str, Any]]
"""Returns the ``/topk`` document; called with ``n=<int>`` when the query has ``?n=``."""

_MAX_TOP_N = 100_000


def _normalize_health(result: Any) -> tuple[bool, dict[str, Any]]:
    if isinstance(result, tuple) and len(result) == 2:
        ok, details = result
        body = dict(details) if isinstance(details, dict) else {"details": details}
        ok = bool(ok)
    elif isinstance(result, bool):
        ok, body = result, {}
    elif isinstance(result, dict):
        body = dict(result)
        ok = body.get("status", "ok") == "ok"
    else:
        raise TypeError(f"health callable returned {type(result).__name__}")
    if ok:
        body.setdefault("status", "ok")  # "degraded" stays: healthy, with reasons
        if body["status"] == "unhealthy":
            body["status"] = "ok"
    else:
        if body.get("status") in (None, "ok"):
            body["status"] = "unhealthy"
        body.setdefault("reasons", ["unhealthy"])
    return ok, body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: HttpServer


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "hotkeyd"
    protocol_version = "HTTP/1.1"
    # An idle or half-open client must not pin a thread forever (keep-alive included).
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: no line per request on stderr (scrapes arrive every few seconds)."""

    def do_GET(self) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        route = parts.path.rstrip("/") or "/"
        try:
            if owner.console is not None and owner.console.owns(self.path):
                resp = owner.console.handle(self.path, self.headers)
                self._send(resp.status, resp.body, resp.content_type, resp.headers)
            elif route == "/metrics":
                self._send(HTTPStatus.OK, generate_latest(owner.registry), CONTENT_TYPE_LATEST)
            elif route == "/healthz":
                ok, body = _normalize_health(owner.health())
                self._json(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, body)
            elif route == "/topk" and owner.topk is not None:
                self._topk(owner.topk, parts.query)
            elif route == "/":
                self._json(HTTPStatus.OK, {"endpoints": owner.endpoints()})
            else:
                self._json(
                    HTTPStatus.NOT_FOUND, {"error": "not found", "endpoints": owner.endpoints()}
                )
        except BrokenPipeError:
            pass
        except Exception as exc:  # a failing callable must answer 500, not kill the thread
            owner.errors += 1
            logger.warning("hotkeyd http: %s failed: %s: %s", route, type(exc).__name__, exc)
            if route == "/healthz":
                self._json(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    {"status": "unhealthy", "reasons": [f"health check failed: {exc}"]},
                )
            else:
                self._json(
                    HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"}
                )

    def do_HEAD(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"", "text/plain")

    def _topk(self, topk: TopkFn, query: str) -> None:
        params = parse_qs(query)
        if "n" in params:
            raw = params["n"][0]
            if not raw.isdigit() or not 0 < int(raw) <= _MAX_TOP_N:
                self._json(
                    HTTPStatus.BAD_REQUEST, {"error": f"n must be an integer in [1, {_MAX_TOP_N}]"}
                )
                return
            self._json(HTTPStatus.OK, topk(n=int(raw)))
        else:
            self._json(HTTPStatus.OK, topk())

    def _json(self, status: HTTPStatus, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":"), default=str).encode("utf-8")
        self._send(status, data, "application/json")

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if "Cache-Control" not in (headers or {}):
            self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


class HttpServer:
    """Serves ``/metrics``, ``/healthz`` and ``/topk`` from a daemon thread.

    Args:
        registry: the Prometheus registry to expose (``Metrics.registry``).
        host: interface to bind; loopback by default.
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        health: returns ``(healthy, details)`` for ``/healthz``; always healthy if None.
        topk: returns the ``/topk`` JSON document; the route is 404 if None.
        console: the web console (:class:`hotkeyd.web.Console`), serving ``/``; None: none.

    Raises:
        ConfigError: bad port.
        UnreachableError: the address cannot be bound (in use, not permitted).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        health: HealthFn | None = None,
        topk: TopkFn | None = None,
        console: Console | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"HTTP port must be in [0, 65535], got {port}")
        self.registry = registry
        self.host = host
        self.health: HealthFn = health or (lambda: (True, {}))
        self.topk = topk
        self.console = console
        self.errors = 0
        try:
            cls = _Server6 if ":" in host else _Server
            self._server = cls((host, port), _Handler, bind_and_activate=True)
        except OSError as exc:
            raise UnreachableError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self._server.owner = self
        self._thread: threading.Thread | None = None
        self._closing = False
        self._wake_r, self._wake_w = socket.socketpair()

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def endpoints(self) -> list[str]:
        return ["/metrics", "/healthz"] + (["/topk"] if self.topk is not None else [])

    def start(self) -> None:
        """Serve in a daemon thread (returns at once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._serve, name="hotkeyd-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """``serve_forever`` without its poll: the thread sleeps until a connection or
        ``close()`` (a byte on the wake-up pair), so an idle daemon's HTTP thread does
        not wake four times a second."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._server, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._closing:
                for key, _ in sel.select():
                    if key.fileobj is self._server and not self._closing:
                        self._server._handle_request_noblock()  # type: ignore[attr-defined]
                self._server.service_actions()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._closing = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
            self._thread.join(5.0)
            self._thread = None
        self._server.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
