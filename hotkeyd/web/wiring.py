"""Build the console over a running :class:`~hotkeyd.daemon.service.Service`.

Kept apart from the service so the daemon's module only gains a call: everything the
console reads is an existing public object of the service (its view, detector lags,
health, metrics registry, history settings).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hotkeyd.web.app import Console, ConsoleSource
from hotkeyd.web.memory import KeyMemory
from hotkeyd.web.security import Guard, read_token_file

if TYPE_CHECKING:
    from hotkeyd.clock import Clock
    from hotkeyd.detector.intervals import Interval
    from hotkeyd.protocol.auth import MessageAuth
    from hotkeyd.protocol.wire import Message, Namespace

_SNAPSHOTS_MAX_AGE = 1.0  # s one read of every instance's snapshot serves key pages

__all__ = ["console_for"]


def console_for(service: Any, auth: MessageAuth | None = None) -> Console:
    """The console of ``service`` (a :class:`~hotkeyd.daemon.service.Service`; not
    imported here, the service imports this module). ``auth``: the daemon's message key,
    to verify the other daemons' snapshots (the service passes it: it owns the factory).

    Raises:
        ConfigError: bound off loopback without a token; an unreadable token file.
    """
    s = service.settings
    token = read_token_file(s.console_token_file) if s.console_token_file else None
    guard = Guard(s.http_host, token)
    memory = KeyMemory(max_keys=max(2 * s.max_hot, 2000))
    history = announcers = None
    if s.redis_url:
        from hotkeyd.conn.redis import client_from_url
        from hotkeyd.publish.history import read_history

        client = client_from_url(s.redis_url, socket_timeout=3.0)
        ns = service.namespace

        def history(since: float, until: float | None, glob: bytes | None) -> list[Interval]:
            return read_history(client, ns, since=since, until=until, pattern=glob)

        announcers = _announcers(client, ns, auth, service.clock)
    if service.demand is not None:
        service.demand.on_report = memory.demand

    def view() -> tuple[list[Any], list[dict[str, Any]]]:
        return service.view

    return Console(
        ConsoleSource(
            instance=service.instance,
            view=view,
            lags=service.detector.lags,
            health=service.health,
            registry=service.metrics.registry,
            memory=memory,
            history=history,
            components=service.sources_state,
            clock=service.clock.time,
            announcers=announcers,
            demand=service.demand is not None,
        ),
        guard,
    )


def _announcers(
    client: Any, ns: Namespace, auth: MessageAuth | None, clock: Clock
) -> Callable[[int, bytes], list[str]]:
    """``(db, key) -> instances`` whose live snapshot in Redis has the key hot.

    One read of every snapshot (:func:`~hotkeyd.client.snapshots.fetch_snapshots`, the
    reader ``hotkeyd top`` uses; verified with the daemon's own key when it signs) serves
    every key page for a second, however many tabs poll.
    """
    from hotkeyd.client.snapshots import fetch_snapshots

    lock = threading.Lock()
    cache: list[Any] = [-1e18, {}]

    def announcers(db: int, key: bytes) -> list[str]:
        with lock:
            if clock.monotonic() - cache[0] > _SNAPSHOTS_MAX_AGE:
                cache[1] = fetch_snapshots(client, ns, clock=clock, auth=auth)
                cache[0] = clock.monotonic()
            snaps: dict[str, Message] = cache[1]
        return sorted(
            i for i, m in snaps.items() if any(h.db == db and h.key == key for h in m.hot)
        )

    return announcers
