"""KeepAlive: extend a lease in the background while a long operation runs.

A short lease finds a crashed holder quickly; a long operation then needs heartbeats::

    b = guard.begin(key, body)
    with KeepAlive(guard, b.lease) as ka:          # a thread renews the lease
        for chunk in work:
            if ka.lost.is_set():   # another caller took over: stop, our complete is refused
                break
            process(chunk)
    guard.complete(b.lease, result)

With an :class:`~hotkeyd.idempotency.AsyncIdempotencyGuard` it is
``async with KeepAlive(guard, b.lease) as ka:`` (an asyncio task renews the lease). A
plain ``with`` on an async guard raises ``TypeError``: a thread calling ``extend`` there
would only create coroutines that nobody awaits, and the lease would never be renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency.errors import IdempotencyError, LeaseLostError
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.outcome import Lease

if TYPE_CHECKING:
    from hotkeyd.idempotency.aioguard import AsyncIdempotencyGuard

__all__ = ["KeepAlive"]


class KeepAlive:
    """Renew ``lease`` every ``every`` seconds (default: a third of the guard's lease).

    ``lost`` is set when a renewal was refused (the lease was taken over or released);
    a Redis outage is retried at the next beat (the lease may run out meanwhile).
    ``with`` for an :class:`IdempotencyGuard` (a thread), ``async with`` for an
    ``AsyncIdempotencyGuard`` (a task on the running loop).
    """

    def __init__(
        self,
        guard: IdempotencyGuard | AsyncIdempotencyGuard,
        lease: Lease,
        every: float | None = None,
    ) -> None:
        self.guard = guard
        self.lease = lease
        self.every = guard.settings.lease / 3 if every is None else every
        if not 0 < self.every < guard.settings.lease:
            raise ConfigError(f"every must be in (0, lease), got {self.every}")
        self.lost = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None

    def _beat(self, exc: BaseException | None) -> bool:
        """Account for one renewal (``exc``: how it failed); False: stop renewing."""
        if exc is None:
            self.beats += 1
            return True
        if isinstance(exc, LeaseLostError):
            self.lost.set()
            return False
        return isinstance(exc, IdempotencyError)  # Redis down (closed mode): next beat

    def _run(self) -> None:
        assert isinstance(self.guard, IdempotencyGuard)
        while not self._stop.wait(self.every):
            try:
                self.guard.extend(self.lease)
            except IdempotencyError as exc:
                if not self._beat(exc):
                    return
            else:
                self._beat(None)

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.every)
            if self._stop.is_set():
                return
            try:
                await self.guard.extend(self.lease)  # type: ignore[misc]
            except IdempotencyError as exc:
                if not self._beat(exc):
                    return
            else:
                self._beat(None)

    def __enter__(self) -> KeepAlive:
        if not isinstance(self.guard, IdempotencyGuard):
            raise TypeError("an AsyncIdempotencyGuard's lease is kept alive with `async with`")
        self._thread = threading.Thread(target=self._run, name="idempotency-keepalive", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    async def __aenter__(self) -> KeepAlive:
        if isinstance(self.guard, IdempotencyGuard):
            raise TypeError("an IdempotencyGuard's lease is kept alive with a plain `with`")
        self._task = asyncio.ensure_future(self._run_async())
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            # The flag ends the loop even when the cancel is lost (swallowed inside the
            # client by a read timeout racing it): the exit never waits for ever.
            self._stop.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
