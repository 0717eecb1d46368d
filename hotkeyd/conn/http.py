"""One small HTTP GET for the daemon's own endpoints (``/topk``, ``/healthz``).

The standard library is enough: the daemon's endpoints are plain HTTP on a trusted
network, and ``top --http`` / ``check`` must not pull in an HTTP client library.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from hotkeyd.errors import ConfigError, UnreachableError

__all__ = ["HttpReply", "http_get"]


@dataclass(frozen=True)
class HttpReply:
    """Status and body of a response (any status, 4xx/5xx included)."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def http_get(url: str, *, timeout: float = 5.0) -> HttpReply:
    """GET ``url``; an error status is a reply, not an exception.

    Raises:
        ConfigError: ``url`` is not an http:// or https:// URL.
        UnreachableError: nothing answered (refused, timed out, bad host).
    """
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"expected an http:// URL, got {url!r}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return HttpReply(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        return HttpReply(exc.code, exc.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UnreachableError(f"cannot reach {url}: {exc}") from exc
