"""Signal handling for the daemon, installed before anything else can receive a signal.

``hotkeyd run`` installs a :class:`SignalLatch` as the first thing it does, before it
parses settings, loads rules or builds sources: a SIGHUP sent by a supervisor right
after start (its default action would kill the process) or a SIGTERM during a slow
start is recorded, and handed to the service once it exists. SIGHUP then reloads the
rules (a bad file keeps the old ones), SIGTERM/SIGINT stop gracefully.
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Protocol

__all__ = ["SignalLatch", "install_early", "take_early"]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Target(Protocol):
    def request_stop(self) -> None: ...

    def request_reload(self) -> None: ...


class SignalLatch:
    """Records SIGTERM/SIGINT/SIGHUP until a target is attached, then forwards them.

    Use as a context manager in the main thread; the previous handlers come back on exit.
    """

    def __init__(self) -> None:
        self.stop_requested = False
        self.reload_requested = False
        self._target: _Target | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> SignalLatch:
        if self._old:  # already installed (install_early): entering again changes nothing
            return self
        for s in _SIGNALS:
            self._old[s] = signal.getsignal(s)
            signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            self.reload_requested = True
            if self._target is not None:
                self._target.request_reload()
            return
        logger.info("received %s; shutting down", signal.Signals(signum).name)
        self.stop_requested = True
        if self._target is not None:
            self._target.request_stop()

    def attach(self, target: _Target) -> None:
        """Forward signals to ``target`` from now on, and those received before."""
        self._target = target
        if self.stop_requested:
            target.request_stop()
        if self.reload_requested:
            target.request_reload()


_early: SignalLatch | None = None


def install_early(argv: list[str]) -> None:
    """Install a latch now if ``argv`` runs the daemon (called first thing by the CLI
    module, before click and the settings are imported: ~0.1 s earlier than the command)."""
    global _early
    # The command is the first argument that is not an option: the root group's options
    # (-V, -h) take no value. "run" later on is an option's value or another command's
    # argument (`hotkeyd watch --channel run`), and a latch there would swallow Ctrl-C.
    command = next((a for a in argv[1:] if not a.startswith("-")), None)
    if _early is None and command == "run":
        _early = SignalLatch().__enter__()


def take_early() -> SignalLatch | None:
    """The latch :func:`install_early` installed, if any (the caller now owns it)."""
    global _early
    latch, _early = _early, None
    return latch
