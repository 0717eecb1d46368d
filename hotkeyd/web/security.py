"""Who may read the console: the Host check, the optional token, and the response headers.

* **Host**: a page on ``evil.example`` whose name the attacker re-points at 127.0.0.1 (DNS
  rebinding) reaches a loopback console with ``Host: evil.example``. Only the names of the
  bound address are accepted (``127.0.0.1``/``localhost``/``[::1]`` for loopback, the bound
  IP otherwise, plus any ``allowed_hosts``). A wildcard bind (``0.0.0.0``) has no one name, so
  it requires a token, which is the real guard there.
* **Token**: read from a file (never argv, never logged, never echoed). Accepted as
  ``Authorization: Bearer <token>`` or as Basic auth whose password is the token (any user;
  a file holding ``user:password`` requires that user). Browsers prompt for Basic auth on
  the 401, so a person needs nothing but the password.
* **Headers**: a CSP of ``default-src 'self'`` (no inline script or style can run), no
  framing, no sniffing, no referrer.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from email.message import Message

from hotkeyd.errors import ConfigError

__all__ = ["SECURITY_HEADERS", "Guard", "read_token_file"]

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
_TOKEN_BYTES_MIN = 16


def read_token_file(path: str) -> str:
    """The token in ``path`` (first line, stripped).

    Raises:
        ConfigError: missing, unreadable, empty or shorter than 16 characters (the message
            names the file, never its content).
    """
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"console token file {path}: cannot read it ({type(exc).__name__})"
        ) from exc
    if len(token) < _TOKEN_BYTES_MIN:
        raise ConfigError(
            f"console token file {path}: the token must be at least {_TOKEN_BYTES_MIN} characters"
        )
    return token


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """Decides whether one request may see the console.

    Args:
        bind_host: the address the HTTP server listens on.
        token: the shared secret, or None for no authentication.
        allowed_hosts: more ``Host`` names to accept (a reverse proxy's name).

    Raises:
        ConfigError: a wildcard or non-loopback bind without a token.
    """

    def __init__(
        self, bind_host: str, token: str | None = None, allowed_hosts: tuple[str, ...] = ()
    ) -> None:
        self._token = token
        self._user: str | None = None
        if token is not None and ":" in token:
            self._user, self._token = token.split(":", 1)
        if token is None and not is_loopback(bind_host):
            raise ConfigError(
                f"the web console on {bind_host} (not loopback) needs --console-token-file, "
                "or --no-console to serve without it"
            )
        self.any_host = is_wildcard(bind_host)
        names = set(_LOOPBACK_NAMES) if is_loopback(bind_host) else {bind_host.lower()}
        if ":" in bind_host and not bind_host.startswith("["):
            names.add(f"[{bind_host.lower()}]")
        self.hosts = frozenset(names | {h.lower() for h in allowed_hosts})

    @property
    def needs_auth(self) -> bool:
        return self._token is not None

    def host_ok(self, host: str | None) -> bool:
        """The ``Host`` header names the bound address (port ignored)."""
        if host is None:
            return False
        name = host.strip().lower()
        if name.startswith("["):
            name = name[: name.find("]") + 1] if "]" in name else name
        elif name.count(":") == 1:
            name = name.split(":", 1)[0]
        return self.any_host or name in self.hosts

    def auth_ok(self, authorization: str | None) -> bool:
        """The ``Authorization`` header carries the token (always True without one)."""
        if self._token is None:
            return True
        if not authorization:
            return False
        scheme, _, cred = authorization.strip().partition(" ")
        cred = cred.strip()
        want = self._token.encode("utf-8")
        if scheme.lower() == "bearer" and self._user is None:
            return hmac.compare_digest(cred.encode("utf-8"), want)
        if scheme.lower() == "basic":
            try:
                user, _, password = (
                    base64.b64decode(cred, validate=True).decode("utf-8").partition(":")
                )
            except (binascii.Error, ValueError):
                return False
            user_ok = self._user is None or hmac.compare_digest(
                user.encode("utf-8"), self._user.encode("utf-8")
            )
            return hmac.compare_digest(password.encode("utf-8"), want) and user_ok
        return False

    def check(self, headers: Message) -> int | None:
        """None when allowed, else the HTTP status to refuse with (421 Host, 401 auth)."""
        if not self.host_ok(headers.get("Host")):
            return 421
        if not self.auth_ok(headers.get("Authorization")):
            return 401
        return None
