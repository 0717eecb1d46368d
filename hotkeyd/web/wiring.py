"""Build the console over a running :class:`~hotkeyd.daemon.service.Service`.

Kept apart from the service so the daemon's module only gains a call: everything the
console reads is an existing public object of the service (its view, detector lags,
health, metrics registry, history settings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hotkeyd.web.app import Console, ConsoleSource
from hotkeyd.web.memory import KeyMemory
from hotkeyd.web.security import Guard, read_token_file

if TYPE_CHECKING:
    from hotkeyd.detector.intervals import Interval

__all__ = ["console_for"]


def console_for(service: Any) -> Console:
    """The console of ``service`` (a :class:`~hotkeyd.daemon.service.Service`; not
    imported here, the service imports this module).

    Raises:
        ConfigError: bound off loopback without a token; an unreadable token file.
    """
    s = service.settings
    token = read_token_file(s.console_token_file) if s.console_token_file else None
    guard = Guard(s.http_host, token)
    memory = KeyMemory(max_keys=max(2 * s.max_hot, 2000))
    history = None
    if s.redis_url:
        from hotkeyd.conn.redis import client_from_url
        from hotkeyd.publish.history import read_history

        client = client_from_url(s.redis_url, socket_timeout=3.0)
        ns = service.namespace

        def history(since: float, until: float | None, glob: bytes | None) -> list[Interval]:
            return read_history(client, ns, since=since, until=until, pattern=glob)

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
        ),
        guard,
    )
