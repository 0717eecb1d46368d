"""KeepAlive: extend a lease in the background while a long operation runs.

A short lease finds a crashed holder quickly; a long operation then needs heartbeats::

    b = guard.begin(key, body)
    with KeepAlive(guard, b.lease) as ka:
        for chunk in work:
            if ka.lost.is_set():   # another caller took over: stop, our complete is refused
                break
            process(chunk)
    guard.complete(b.lease, result)
"""

from __future__ import annotations

import threading
from types import TracebackType

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency.errors import IdempotencyError, LeaseLostError
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.outcome import Lease

__all__ = ["KeepAlive"]


class KeepAlive:
    """Renew ``lease`` every ``every`` seconds (default: a third of the guard's lease).

    ``lost`` is set when a renewal was refused (the lease was taken over or released);
    a Redis outage is retried at the next beat (the lease may run out meanwhile).
    """

    def __init__(self, guard: IdempotencyGuard, lease: Lease, every: float | None = None) -> None:
        self.guard = guard
        self.lease = lease
        self.every = guard.settings.lease / 3 if every is None else every
        if not 0 < self.every < guard.settings.lease:
            raise ConfigError(f"every must be in (0, lease), got {self.every}")
        self.lost = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idempotency-keepalive", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.guard.extend(self.lease)
                self.beats += 1
            except LeaseLostError:
                self.lost.set()
                return
            except IdempotencyError:  # Redis down (closed mode): try again next beat
                continue

    def __enter__(self) -> KeepAlive:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
