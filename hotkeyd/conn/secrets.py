"""Secrets from files: passwords kept out of command lines (``ps`` shows those to every
local user) and out of URLs that end up in logs.

Every URL secret has a ``*_file`` twin: ``redis://user@host/0?password_file=/run/secrets/redis``,
``redis-monitor://...?password_file=...``, ``kafka://...?sasl_password_file=...`` and
``ssl_password_file=...``. The file holds the secret; one trailing line break is ignored.
"""

from __future__ import annotations

from hotkeyd.errors import ConfigError

__all__ = ["read_secret_file"]

_MAX = 64 * 1024


def read_secret_file(path: str, what: str) -> str:
    """The secret in ``path`` (UTF-8, without its trailing line break).

    Raises:
        ConfigError: the file cannot be read, is empty, or is too large (the message
            names the file, never its content).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX + 1)
    except OSError as exc:
        raise ConfigError(f"{what} file {path!r}: {exc.strerror or exc}") from None
    if len(data) > _MAX:
        raise ConfigError(f"{what} file {path!r}: larger than {_MAX} bytes")
    if data.endswith(b"\n"):
        data = data[:-1]
    if data.endswith(b"\r"):
        data = data[:-1]
    if not data:
        raise ConfigError(f"{what} file {path!r} is empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} file {path!r} is not UTF-8") from None
