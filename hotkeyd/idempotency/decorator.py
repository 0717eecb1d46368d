"""@idempotent: guard a plain function with an idempotency key taken from its arguments.

::

    @idempotent(guard, key=lambda order_id, **_: operation_key("charge", order_id))
    def charge(order_id: str, amount: int) -> dict: ...

The first call runs the function and stores its JSON-encoded return value; a retry with
the same key returns the stored value (decoded) without running it; a call while the
first is still running raises :class:`~hotkeyd.idempotency.errors.IdempotencyInProgress`; the same
key with a different fingerprint raises :class:`~hotkeyd.idempotency.errors.IdempotencyMismatch`.
An exception releases the key, so a retry runs the function again; so does a return
value ``encode`` cannot store (e.g. a set with the default JSON: a ``TypeError``). ``async def``
functions are guarded the same way with an ``AsyncIdempotencyGuard``.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from hotkeyd.idempotency.aioguard import AsyncIdempotencyGuard
from hotkeyd.idempotency.core import Fingerprint
from hotkeyd.idempotency.errors import IdempotencyInProgress, IdempotencyMismatch
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.outcome import Begin, Lease, Outcome

__all__ = ["idempotent"]

P = ParamSpec("P")
R = TypeVar("R")


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _decode(raw: bytes) -> Any:
    return json.loads(raw)


def _refuse(b: Begin, key: str) -> None:
    if b.outcome is Outcome.IN_PROGRESS:
        raise IdempotencyInProgress(
            f"idempotency key {key!r} is being processed; retry in {b.retry_after:.3f} s",
            retry_after=b.retry_after,
        )
    raise IdempotencyMismatch(f"idempotency key {key!r} was used with a different request")


def idempotent(
    guard: IdempotencyGuard | AsyncIdempotencyGuard,
    *,
    key: Callable[..., str],
    fingerprint: Callable[..., Fingerprint] | None = None,
    wait: float = 0.0,
    encode: Callable[[Any], bytes] = _encode,
    decode: Callable[[bytes], Any] = _decode,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a function run once per idempotency key.

    Args:
        guard: an :class:`IdempotencyGuard`, or an :class:`AsyncIdempotencyGuard` for an
            ``async def`` function.
        key: builds the key from the call's arguments (e.g. with ``operation_key``).
        fingerprint: builds the request fingerprint from the arguments; default: the
            JSON of all arguments, so reusing a key with other arguments is a mismatch.
        wait: seconds to wait for a concurrent first call's result.
        encode, decode: how the return value is stored (JSON by default).
    """

    def default_fp(*args: Any, **kwargs: Any) -> bytes:
        return _encode([args, kwargs])

    fp_of = fingerprint or default_fp

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            if not isinstance(guard, AsyncIdempotencyGuard):
                raise TypeError("an async function needs an AsyncIdempotencyGuard")
            return _wrap_async(fn, guard, key, fp_of, wait, encode, decode)  # type: ignore[return-value]
        if not isinstance(guard, IdempotencyGuard):
            raise TypeError("a plain function needs an IdempotencyGuard")
        sync_guard = guard

        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            k = key(*args, **kwargs)
            b = sync_guard.begin(k, fp_of(*args, **kwargs), wait=wait)
            lease = _lease_or_replay(b, k)
            if lease is None:
                return decode(b.result or b"")
            try:
                value = fn(*args, **kwargs)
                payload = encode(value)  # a result that cannot be stored fails the call
            except BaseException:
                sync_guard.abandon(lease)
                raise
            sync_guard.complete(lease, payload)
            return value

        return guarded

    return wrap


def _lease_or_replay(b: Begin, key: str) -> Lease | None:
    """The lease to run with, None to replay ``b.result``; raises for 409/422 cases."""
    if b.outcome is Outcome.DONE:
        return None
    if b.lease is None:
        _refuse(b, key)
    return b.lease


def _wrap_async(
    fn: Callable[..., Awaitable[Any]],
    guard: AsyncIdempotencyGuard,
    key: Callable[..., str],
    fp_of: Callable[..., Fingerprint],
    wait: float,
    encode: Callable[[Any], bytes],
    decode: Callable[[bytes], Any],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        b = await guard.begin(k, fp_of(*args, **kwargs), wait=wait)
        lease = _lease_or_replay(b, k)
        if lease is None:
            return decode(b.result or b"")
        try:
            value = await fn(*args, **kwargs)
            payload = encode(value)
        except BaseException:
            await guard.abandon(lease)
            raise
        await guard.complete(lease, payload)
        return value

    return guarded
