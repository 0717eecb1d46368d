"""Masking secrets in URLs of any scheme before they reach logs or output."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_AUTHORITY = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^?#]*)")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:sasl_password|ssl_password|password|auth_key)=)[^&#]*", re.I
)


def redact_url(url: str) -> str:
    """Return ``url`` with the password of its userinfo and secret query values as ``***``.

    Works for every source and sink URL hotkeyd takes (``redis://``, ``rediss://``,
    ``kafka://`` with several hosts, ``redis-monitor://``), including ones that
    ``urllib`` cannot parse. The one place hotkeyd masks URLs.

    The userinfo ends at the *last* ``@`` before the query, as the URL parsers read it
    (``redis://u:p@ss@host`` has the password ``p@ss``); a password with an unencoded
    ``/`` is masked whole too. Masking more than the password is preferred to less.
    """
    m = _AUTHORITY.match(url)
    if m:
        rest = m.group("rest")
        at = rest.rfind("@")
        colon = rest.find(":")
        if at > 0 and 0 <= colon < at:
            url = m.group("head") + rest[:colon] + ":***" + rest[at:] + url[m.end() :]
    return _QUERY_SECRET.sub(lambda q: f"{q.group('head')}***", url)
