"""HTTP semantics of the Idempotency-Key header, shared by the ASGI and WSGI middleware.

Follows the IETF draft "The Idempotency-Key HTTP Header Field":

========================================  ===========================================
request                                   response
========================================  ===========================================
first with a key                          the app's response (stored when final)
retry after it finished                   the stored status, headers and body, plus
                                          ``Idempotent-Replayed: true``
retry while the first still runs          409 Conflict, ``Retry-After``
same key, other method/path/query/body    422 Unprocessable Content
no key on a route that requires one       400 Bad Request
empty/oversized/non-ASCII key             400 Bad Request
body over ``max_body``                    413 Content Too Large
Redis (or store) down, failing closed     503 Service Unavailable, ``Retry-After``
========================================  ===========================================

A 5xx, 408, 425 or 429 from the app (or an exception) is not final: it releases the key,
so the client's retry runs the operation again; other statuses are final and replayed.
Responses of guarded requests are buffered to be stored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hotkeyd.idempotency.errors import IdempotencyError
from hotkeyd.idempotency.keys import MAX_KEY_LENGTH, check_key, fingerprint
from hotkeyd.idempotency.outcome import Begin, Outcome

__all__ = [
    "REPLAYED_HEADER",
    "GuardedApp",
    "HttpPolicy",
    "Request",
    "Response",
    "decode_response",
    "encode_response",
    "error_response",
    "failure",
    "refusal",
    "replay",
]

REPLAYED_HEADER = "Idempotent-Replayed"
RETRYABLE = frozenset({408, 425, 429})  # timeout, too early, rate limited: not outcomes
AppT = TypeVar("AppT")
GuardT = TypeVar("GuardT")
Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class Request:
    """What the policy needs to know about a request."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    query: str = ""


@dataclass(frozen=True)
class Response:
    """A buffered response: what is stored and replayed."""

    status: int
    headers: Headers
    body: bytes


@dataclass
class HttpPolicy:
    """Which requests the middleware guards, and how.

    Args:
        methods: methods guarded when they carry the header (GET and HEAD are
            idempotent already).
        required: routes that must carry a key (400 without one): True for all
            guarded methods, a collection of paths, or a predicate on the request.
        user: the caller's identity from the request (e.g. an authenticated user id
            header); keys are separate per user, so one user cannot replay another's
            response. None: one key space for everybody.
        header: the request header carrying the key.
        max_body: largest request body accepted on a guarded request (bytes).
        wait: seconds a retry waits for a first request still running before 409.
    """

    methods: Collection[str] = ("POST", "PATCH", "PUT", "DELETE")
    required: bool | Collection[str] | Callable[[Request], bool] = False
    user: Callable[[Request], str] | None = None
    header: str = "Idempotency-Key"
    max_body: int = 1 << 20
    wait: float = 0.0
    _methods: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._methods = frozenset(m.upper() for m in self.methods)
        self.header_lower = self.header.lower()

    @staticmethod
    def is_final(status: int) -> bool:
        """Whether a response is the request's outcome (stored) or worth a retry (released)."""
        return status < 500 and status not in RETRYABLE

    def guarded(self, req: Request) -> bool:
        return req.method.upper() in self._methods

    def requires(self, req: Request) -> bool:
        if isinstance(self.required, bool):
            return self.required
        if callable(self.required):
            return bool(self.required(req))
        return req.path in self.required

    def key_of(self, req: Request) -> str | None:
        """The guard key of ``req`` (None: no header). Raises IdempotencyKeyError."""
        raw = req.headers.get(self.header_lower)
        if raw is None:
            return None
        key = check_key(_unquote(raw), MAX_KEY_LENGTH)
        if self.user is None:
            return key
        return f"u{fingerprint(self.user(req))}:{key}"

    @staticmethod
    def fingerprint_of(req: Request, body: bytes) -> str:
        return fingerprint(req.method.upper(), req.path, req.query, body)


class GuardedApp(Generic[AppT, GuardT]):
    """Base of the ASGI and WSGI middleware.

    Args:
        app: the wrapped application.
        guard: the idempotency guard (asyncio for ASGI, thread for WSGI).
        policy: which requests are guarded and how (default: :class:`HttpPolicy()`).
    """

    def __init__(self, app: AppT, guard: GuardT, policy: HttpPolicy | None = None) -> None:
        self.app = app
        self.guard = guard
        self.policy = policy or HttpPolicy()


def _unquote(raw: str) -> str:
    # The draft makes the key a Structured Field string ("..."); bare tokens are accepted.
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1]
    return raw


def encode_response(r: Response) -> bytes:
    """Status and headers as one JSON line, then the body bytes as they were."""
    head = json.dumps({"s": r.status, "h": r.headers}, separators=(",", ":"))
    return head.encode("latin-1") + b"\n" + r.body


def decode_response(raw: bytes) -> Response:
    head, _, body = raw.partition(b"\n")
    obj = json.loads(head.decode("latin-1"))
    return Response(int(obj["s"]), [(str(k), str(v)) for k, v in obj["h"]], body)


def replay(raw: bytes) -> Response:
    """The stored response with ``Idempotent-Replayed: true`` added."""
    r = decode_response(raw)
    return Response(r.status, [*r.headers, (REPLAYED_HEADER, "true")], r.body)


def error_response(status: int, message: str, retry_after: float | None = None) -> Response:
    """A small JSON error (``{"error": ...}``) as the middleware answers it."""
    body = json.dumps({"error": message}).encode()
    headers: Headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    if retry_after is not None:
        headers.append(("retry-after", str(max(1, math.ceil(retry_after)))))
    return Response(status, headers, body)


def refusal(b: Begin) -> Response:
    """The answer to a begin that is not NEW: a replay, 409 or 422."""
    if b.outcome is Outcome.DONE:
        return replay(b.result or b"")
    if b.outcome is Outcome.IN_PROGRESS:
        return error_response(
            409, "a request with this Idempotency-Key is still being processed", b.retry_after
        )
    return error_response(422, "this Idempotency-Key was used with a different request")


def failure(exc: IdempotencyError) -> Response:
    """The answer when the guard raised (bad key, Redis down in closed mode)."""
    if isinstance(exc, ValueError):
        return error_response(400, str(exc))
    return error_response(503, "idempotency check unavailable, retry later", 1.0)
