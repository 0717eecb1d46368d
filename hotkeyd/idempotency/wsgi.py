"""WSGI middleware honouring the Idempotency-Key header (Flask, Django, any WSGI app).

::

    app.wsgi_app = IdempotencyWSGIMiddleware(app.wsgi_app, guard=IdempotencyGuard(r),
                                             policy=HttpPolicy(required={"/order"}))

Status codes: see :mod:`hotkeyd.idempotency.http`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from hotkeyd.idempotency.errors import IdempotencyError
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.http import (
    GuardedApp,
    Request,
    Response,
    encode_response,
    error_response,
    failure,
    refusal,
)
from hotkeyd.idempotency.outcome import Outcome

__all__ = ["LEASE_ENVIRON", "IdempotencyWSGIMiddleware"]

LEASE_ENVIRON = "hotkeyd.idempotency_lease"  # environ key of the lease

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class IdempotencyWSGIMiddleware(GuardedApp[WSGIApp, IdempotencyGuard]):
    """Guard requests that carry an Idempotency-Key (see the module docstring).

    Args: see :class:`~hotkeyd.idempotency.http.GuardedApp`.
    """

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        req = _request(environ)
        pol = self.policy
        if not pol.guarded(req):
            return self.app(environ, start_response)
        try:
            key = pol.key_of(req)
            if key is None:
                if pol.requires(req):
                    return _send(
                        start_response, error_response(400, f"this route needs {pol.header}")
                    )
                return self.app(environ, start_response)
            body = _read_body(environ, pol.max_body)
            if body is None:
                return _send(
                    start_response, error_response(413, f"request body over {pol.max_body} bytes")
                )
            b = self.guard.begin(key, pol.fingerprint_of(req, body), wait=pol.wait)
        except ValueError as exc:
            if isinstance(exc, IdempotencyError):
                return _send(start_response, failure(exc))
            return _send(start_response, error_response(400, "bad Content-Length"))
        except IdempotencyError as exc:
            return _send(start_response, failure(exc))
        if b.outcome is not Outcome.NEW or b.lease is None:
            return _send(start_response, refusal(b))
        environ[LEASE_ENVIRON] = b.lease  # for the handler: e.g. its fencing token
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        try:
            resp = _run(self.app, environ)
        except BaseException:
            self.guard.abandon(b.lease)
            raise
        if not self.policy.is_final(resp.status):
            self.guard.abandon(b.lease)
        else:
            try:
                self.guard.complete(b.lease, encode_response(resp))
            except IdempotencyError as exc:
                note = f"not recorded: {type(exc).__name__}"
                resp = Response(
                    resp.status, [*resp.headers, ("Idempotency-Warning", note)], resp.body
                )
        return _send(start_response, resp)


def _read_body(environ: Environ, limit: int) -> bytes | None:
    """The request body, or None if it is over ``limit`` (ValueError: bad Content-Length)."""
    raw = environ.get("CONTENT_LENGTH") or ""
    if raw:
        length = int(raw)
        if length < 0:
            raise ValueError(raw)
        if length > limit:
            return None
        return bytes(environ["wsgi.input"].read(length)) if length else b""
    if environ.get("wsgi.input_terminated"):  # chunked: the server marks the end
        body = bytes(environ["wsgi.input"].read(limit + 1))
        return None if len(body) > limit else body
    return b""


def _request(environ: Environ) -> Request:
    headers = {
        k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")
    }
    path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    query = environ.get("QUERY_STRING", "")
    return Request(environ.get("REQUEST_METHOD", "GET"), path, headers, query)


def _run(app: WSGIApp, environ: Environ) -> Response:
    captured: dict[str, Any] = {}
    written: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        captured["status"] = int(status.split(" ", 1)[0])
        captured["headers"] = list(headers)
        return written.append

    result = app(environ, start_response)
    try:
        for chunk in result:
            written.append(chunk)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return Response(captured.get("status", 500), captured.get("headers", []), b"".join(written))


def _send(start_response: StartResponse, resp: Response) -> list[bytes]:
    try:
        reason = HTTPStatus(resp.status).phrase
    except ValueError:
        reason = "Unknown"
    start_response(f"{resp.status} {reason}", resp.headers)
    return [resp.body]
