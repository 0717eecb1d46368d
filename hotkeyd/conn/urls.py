"""Masking secrets in URLs of any scheme before they reach logs or output."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_USERINFO = re.compile(r"(?P<head>//[^/@:]*):(?P<secret>[^@/]*)@")
_QUERY_SECRET = re.compile(r"(?P<head>[?&](?:sasl_password|ssl_password|password)=)[^&]*", re.I)


def redact_url(url: str) -> str:
    """Return ``url`` with the password of its userinfo and secret query values as ``***``.

    Works for every source and sink URL hotkeyd takes (``redis://``, ``rediss://``,
    ``kafka://`` with several hosts, ``redis-monitor://``), including ones that
    ``urllib`` cannot parse. The one place hotkeyd masks URLs.
    """
    url = _USERINFO.sub(lambda m: f"{m.group('head')}:***@", url, count=1)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('head')}***", url)
