"""The web console: what is hot, where it is served, and what happened, in a browser.

``hotkeyd run`` serves it at ``/`` on its HTTP port (``--no-console`` turns it off). It is
read-only and ships as package data (one HTML page, one script, one style sheet: no CDN,
no build step). :mod:`~hotkeyd.web.app` answers the routes, :mod:`~hotkeyd.web.memory`
keeps the bounded per-key history, :mod:`~hotkeyd.web.security` checks Host and token.
"""

from hotkeyd.web.app import Console, ConsoleSource, Response, show_key
from hotkeyd.web.memory import KeyMemory
from hotkeyd.web.security import Guard, read_token_file

__all__ = [
    "Console",
    "ConsoleSource",
    "Guard",
    "KeyMemory",
    "Response",
    "read_token_file",
    "show_key",
]
