"""Fork safety: restart background threads in a forked child.

Threads do not survive ``fork()``. An application server that imports the app once and
then forks its workers (gunicorn ``--preload``, Celery's prefork pool, uvicorn
``--workers`` with the fork start method, ``multiprocessing``) would leave every worker
with a subscriber object whose thread only exists in the parent: no hot keys, no
invalidations, silently. Objects registered here get ``after_fork_in_child()`` in the
child (through :func:`os.register_at_fork`), which drops the parent's sockets and
starts the thread again.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

__all__ = ["track_fork"]

logger = logging.getLogger(__name__)


class _ForkAware(Protocol):
    def after_fork_in_child(self) -> None: ...


_tracked: weakref.WeakSet[_ForkAware] = weakref.WeakSet()


def track_fork(obj: _ForkAware) -> None:
    """Call ``obj.after_fork_in_child()`` in every forked child while ``obj`` lives."""
    _tracked.add(obj)


def _after_fork_in_child() -> None:
    for obj in list(_tracked):
        try:
            obj.after_fork_in_child()
        except Exception:  # one broken object must not break the others or the child
            logger.exception("hotkeyd: restarting %r after fork failed", obj)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
