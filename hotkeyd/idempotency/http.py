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

import collections
import copy
import dataclasses
import json
import math
import statistics
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hotkeyd.idempotency.errors import IdempotencyError, IdempotencyKeyError
from hotkeyd.idempotency.keys import MAX_KEY_LENGTH, check_key, fingerprint, gateway_key
from hotkeyd.idempotency.outcome import Begin, Outcome

__all__ = [
    "PROBLEM_TYPE",
    "REPLAYED_HEADER",
    "GuardedApp",
    "HandlerTimes",
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
        user: the caller's identity from the request (e.g. an authenticated user or
            tenant id); keys are separate per caller, so one caller cannot replay
            another's response. None (default): the digest of the ``Authorization``
            header names the caller (requests without one share one anonymous space).
        shared: one key space for every caller (the old default): a key sent by two
            callers is one operation. Only for keys that are meant to be shared.
        legacy_unscoped: the transition window after upgrading from the unscoped default:
            a first request (NEW under its scoped key) also looks up the same key in the
            old unscoped space (one HMGET) and replays a final record of the same
            request found there. Turn it off once the guard's ``ttl`` has passed since
            the upgrade.
        canonical_json: fingerprint a JSON body by its canonical form (sorted keys, no
            whitespace), so a retry that re-serializes the same document is not a 422. A
            body that is not JSON is fingerprinted as bytes.
        fields: with ``canonical_json``, the top-level fields that count (e.g. ``("sku",
            "qty")``); others, such as a client timestamp, are ignored.
        gateway: de-duplicate guarded requests that carry no key (on routes that do not
            require one) by :func:`~hotkeyd.idempotency.gateway_key` of the caller, path
            and body: identical requests within ``gateway_ttl`` are one (double clicks,
            network retries), with a record of that short TTL.
        gateway_ttl: seconds a gateway record lives (and the longest lease it gets).
        header: the request header carrying the key.
        max_body: largest request body accepted on a guarded request (bytes).
        wait: seconds a retry waits for a first request still running before 409.
    """

    methods: Collection[str] = ("POST", "PATCH", "PUT", "DELETE")
    required: bool | Collection[str] | Callable[[Request], bool] = False
    user: Callable[[Request], str] | None = None
    shared: bool = False
    legacy_unscoped: bool = True
    canonical_json: bool = False
    fields: Collection[str] | None = None
    gateway: bool = False
    gateway_ttl: float = 10.0
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
        return key if self.shared else f"{self._caller(req)}:{key}"

    def _caller(self, req: Request) -> str:
        if self.user is None:
            return f"a{fingerprint(req.headers.get('authorization', ''))}"
        return f"u{fingerprint(self.user(req))}"

    def gateway_key_of(self, req: Request, body: bytes) -> str:
        """The gateway dedup key of a request without a key: caller, method, path, query
        and body (the same request from the same caller)."""
        caller = "" if self.shared else self._caller(req)
        target = f"{req.method.upper()} {req.path}?{req.query}"
        return gateway_key(caller, target, body)

    def legacy_key_of(self, req: Request) -> str | None:
        """The key ``req`` had under the old unscoped default, in the transition window."""
        if self.shared or self.user is not None or not self.legacy_unscoped:
            return None
        raw = req.headers.get(self.header_lower)
        return None if raw is None else _unquote(raw)

    def fingerprint_of(self, req: Request, body: bytes) -> str:
        """What identifies the request: method, path, query and body (see ``canonical_json``)."""
        return fingerprint(req.method.upper(), req.path, req.query, self._body_part(body))

    def _body_part(self, body: bytes) -> bytes:
        if not self.canonical_json:
            return body
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):  # not JSON: the bytes as they are
            return body
        if self.fields is not None and isinstance(doc, dict):
            doc = {k: doc[k] for k in self.fields if k in doc}
        canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return b"json:" + canon.encode("utf-8")


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
        self.times = HandlerTimes()  # for 409's Retry-After
        self.gateway_guard = guard
        if self.policy.gateway:  # the same guard with the gateway's short TTL (and lease)
            self.gateway_guard = copy.copy(guard)
            settings = guard.settings  # type: ignore[attr-defined]
            ttl = self.policy.gateway_ttl
            self.gateway_guard.settings = dataclasses.replace(  # type: ignore[attr-defined]
                settings, ttl=ttl, lease=min(settings.lease, ttl)
            )


def _unquote(raw: str) -> str:
    # The draft makes the key a Structured Field string ("..."); bare tokens are accepted.
    # A comma outside a quoted string means two field lines (combined) or a list: refused,
    # or the last one would silently win.
    quoted = False
    for ch in raw:
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            raise IdempotencyKeyError("send one Idempotency-Key header, not several")
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


PROBLEM_TYPE = "docs/idempotency.md#http-idempotency-key-middleware"  # the docs' section
# RFC 9110's names, fixed here (HTTPStatus's phrases change between Python versions), the
# same in every language (spec/vectors/idempotency.json, "http").
_TITLES = {
    400: "Bad Request",
    409: "Conflict",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def error_response(status: int, message: str, retry_after: float | None = None) -> Response:
    """An RFC 9457 problem (``application/problem+json``) whose ``type`` links the docs."""
    problem = {
        "type": PROBLEM_TYPE,
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": message,
    }
    body = json.dumps(problem).encode()
    headers: Headers = [
        ("content-type", "application/problem+json"),
        ("content-length", str(len(body))),
    ]
    if retry_after is not None:
        headers.append(("retry-after", str(max(1, math.ceil(retry_after)))))
    return Response(status, headers, body)


def refusal(b: Begin, expected: float | None = None) -> Response:
    """The answer to a begin that is not NEW: a replay, 409 or 422.

    ``expected``: how long the route's handler usually takes (its running median); a 409
    says to retry after the lower of that and the holder's remaining lease.
    """
    if b.outcome is Outcome.DONE:
        return replay(b.result or b"")
    if b.outcome is Outcome.IN_PROGRESS:
        wait = b.retry_after if expected is None else min(b.retry_after, expected)
        return error_response(
            409, "a request with this Idempotency-Key is still being processed", wait
        )
    return error_response(422, "this Idempotency-Key was used with a different request")


class HandlerTimes:
    """A running median of each route's handler time (the last ``window`` runs)."""

    def __init__(self, window: int = 51) -> None:
        self.window = window
        self._by_path: dict[str, collections.deque[float]] = {}

    def add(self, path: str, seconds: float) -> None:
        d = self._by_path.get(path)
        if d is None:
            d = self._by_path.setdefault(path, collections.deque(maxlen=self.window))
        d.append(seconds)

    def median(self, path: str) -> float | None:
        d = self._by_path.get(path)
        return statistics.median(list(d)) if d else None


def failure(exc: IdempotencyError) -> Response:
    """The answer when the guard raised (bad key, Redis down in closed mode)."""
    if isinstance(exc, ValueError):
        return error_response(400, str(exc))
    return error_response(503, "idempotency check unavailable, retry later", 1.0)
