"""ASGI middleware honouring the Idempotency-Key header (Starlette, FastAPI, any ASGI app).

::

    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, guard=AsyncIdempotencyGuard(redis_async),
                       policy=HttpPolicy(required={"/order"}))

Plain ASGI, no framework import. Status codes: see :mod:`hotkeyd.idempotency.http`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from hotkeyd.errors import ClientError
from hotkeyd.idempotency.aioguard import AsyncIdempotencyGuard
from hotkeyd.idempotency.errors import IdempotencyError
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

__all__ = ["LEASE_STATE", "IdempotencyMiddleware"]

LEASE_STATE = "idempotency_lease"  # scope["state"] key of the lease

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _TooLarge(ClientError):
    pass


class _Disconnected(ClientError):
    pass


class IdempotencyMiddleware(GuardedApp[ASGIApp, AsyncIdempotencyGuard]):
    """Guard requests that carry an Idempotency-Key (see the module docstring).

    Args: see :class:`~hotkeyd.idempotency.http.GuardedApp`.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        req = Request(scope["method"], scope["path"], headers, query)
        pol = self.policy
        if not pol.guarded(req):
            await self.app(scope, receive, send)
            return
        try:
            key = pol.key_of(req)
            if key is None:
                if pol.requires(req):
                    await _send(send, error_response(400, f"this route needs {pol.header}"))
                else:
                    await self.app(scope, receive, send)
                return
            body = await _read_body(receive, pol.max_body)
            b = await self.guard.begin(key, pol.fingerprint_of(req, body), wait=pol.wait)
        except _Disconnected:
            return
        except _TooLarge:
            await _send(send, error_response(413, f"request body over {pol.max_body} bytes"))
            return
        except IdempotencyError as exc:
            await _send(send, failure(exc))
            return
        if b.outcome is not Outcome.NEW or b.lease is None:
            await _send(send, refusal(b))
            return
        lease = b.lease
        # The handler can read the lease (request.state.idempotency_lease in Starlette),
        # e.g. to pass its fencing token on to the database.
        scope = {**scope, "state": {**scope.get("state", {}), LEASE_STATE: lease}}
        try:
            resp = await _run(self.app, scope, body)
        except BaseException:
            await self.guard.abandon(lease)
            raise
        if not self.policy.is_final(resp.status):  # the client's retry runs it again
            await self.guard.abandon(lease)
        else:
            try:
                await self.guard.complete(lease, encode_response(resp))
            except IdempotencyError as exc:  # lost lease / store duplicate: still answer
                resp = _with_warning(resp, exc)
        await _send(send, resp)


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":  # gone before the whole body came: nothing to run
            raise _Disconnected
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return b"".join(chunks)


async def _run(app: ASGIApp, scope: Scope, body: bytes) -> Response:
    """Run the app on the buffered body and buffer its response.

    After the body, ``receive`` never answers: the app is not told the client hung up.
    The response is buffered anyway (the client gets nothing before the app is done),
    and a guarded operation must finish to be recorded; told of a disconnect, a
    streaming response (Starlette's StreamingResponse listens for one) stops early, and
    the cut-off body would be stored and replayed to the client's retry.
    """
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await _forever()
        raise AssertionError("unreachable")

    status = 500
    headers: list[tuple[str, str]] = []
    parts: list[bytes] = []

    async def send(msg: Message) -> None:
        nonlocal status, headers
        if msg["type"] == "http.response.start":
            status = int(msg["status"])
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in msg["headers"]]
        elif msg["type"] == "http.response.body":
            parts.append(bytes(msg.get("body", b"")))

    await app(scope, receive, send)
    return Response(status, headers, b"".join(parts))


async def _forever() -> None:
    """Wait until cancelled, in asyncio or trio (through anyio where it is installed)."""
    try:
        import anyio
    except ImportError:  # plain asyncio servers without anyio
        import asyncio

        await asyncio.Event().wait()
    else:
        await anyio.sleep_forever()


def _with_warning(resp: Response, exc: IdempotencyError) -> Response:
    note = f"not recorded: {type(exc).__name__}"
    return Response(resp.status, [*resp.headers, ("idempotency-warning", note)], resp.body)


async def _send(send: Send, resp: Response) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": resp.status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers],
        }
    )
    await send({"type": "http.response.body", "body": resp.body})
