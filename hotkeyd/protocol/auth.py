"""Optional message authentication: HMAC-SHA256 with a shared key over the exact bytes.

Where Redis ACLs cannot tell publishers apart (Redis 6 has no selectors; shared users
are common), anyone who may PUBLISH on the events channel could otherwise forge hot
keys for every client. With a shared key configured, the daemon signs every message and
snapshot, and clients read only what verifies.

The envelope is additive, so a client without a key still reads signed messages (it
ignores the unknown field). A signed message is the unsigned JSON ``body`` (which ends in
``}``) with its last byte replaced by a suffix of exactly 74 bytes::

    signed = body[:-1] + b',"sig":"' + hex(HMAC-SHA256(key, body)) + b'"}'

``hex`` is 64 lowercase hex digits. To verify: the message must end with ``"}``, the 74
bytes from its end must start with ``,"sig":"``; ``body = signed[:-74] + b"}"``; compare
the MAC in constant time. The MAC covers the exact bytes of ``body``: no JSON
canonicalization, so every language implements it byte-exactly (test vectors:
``spec/vectors/auth.json``; spec: docs/wire-format.md).

Keys come from a file (``--auth-key-file``; one key per line: the first signs, every one
verifies, for rotation) or the environment (``HOTKEYD_AUTH_KEY``, one key), never from
command-line arguments (other local users see those in ``ps``). A key is the line's UTF-8
bytes without the line break; at least 16 bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence

from hotkeyd.errors import ConfigError
from hotkeyd.protocol import limits

__all__ = ["ENV_VAR", "MIN_KEY_BYTES", "SUFFIX_LEN", "MessageAuth"]

ENV_VAR = "HOTKEYD_AUTH_KEY"
MIN_KEY_BYTES = limits.AUTH_KEY_BYTES_MIN
_HEAD = b',"sig":"'
SUFFIX_LEN = len(_HEAD) + 64 + 2  # ,"sig":"<64 hex>"}
_HEX = frozenset(b"0123456789abcdef")


class MessageAuth:
    """Signs and verifies messages with shared keys.

    Args:
        keys: the first key signs; every key verifies (put the new key first while
            rotating, drop the old one when every daemon signs with the new one).
    """

    def __init__(self, keys: Sequence[bytes]) -> None:
        keys = [bytes(k) for k in keys]
        if not keys:
            raise ConfigError("message authentication: no key given")
        for k in keys:
            if len(k) < MIN_KEY_BYTES:
                raise ConfigError(
                    f"message authentication: a key must have at least {MIN_KEY_BYTES} bytes"
                )
        self._keys = keys

    def __repr__(self) -> str:  # never the keys
        return f"MessageAuth({len(self._keys)} key(s))"

    @classmethod
    def from_file(cls, path: str) -> MessageAuth:
        """Keys from ``path``, one per line (blank lines ignored)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ConfigError(f"auth key file {path}: {exc.strerror or exc}") from None
        return cls([line.rstrip(b"\r") for line in data.split(b"\n") if line.strip()])

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, var: str = ENV_VAR
    ) -> MessageAuth | None:
        """The key in ``var`` (``HOTKEYD_AUTH_KEY``), or None when it is unset or empty."""
        value = (os.environ if env is None else env).get(var)
        return cls([value.encode("utf-8")]) if value else None

    def mac(self, body: bytes, key: bytes | None = None) -> bytes:
        """The 64 lowercase hex digits of HMAC-SHA256(key, body) (first key by default)."""
        k = self._keys[0] if key is None else key
        return hmac.new(k, body, hashlib.sha256).hexdigest().encode("ascii")

    def sign(self, body: bytes) -> bytes:
        """``body`` (a JSON object's bytes) with the ``sig`` field appended."""
        if not body.endswith(b"}"):
            raise ValueError("only a JSON object can be signed")
        return body[:-1] + _HEAD + self.mac(body) + b'"}'

    def verify(self, signed: bytes) -> bytes | None:
        """The unsigned body if ``signed`` carries a valid MAC under any key, else None."""
        if len(signed) < SUFFIX_LEN + 2 or not signed.endswith(b'"}'):
            return None
        start = len(signed) - SUFFIX_LEN
        if signed[start : start + len(_HEAD)] != _HEAD:
            return None
        got = signed[start + len(_HEAD) : -2]
        if not _HEX.issuperset(got):
            return None
        body = signed[:start] + b"}"
        ok = False
        for k in self._keys:  # every key, always: timing does not tell which matched
            ok |= hmac.compare_digest(self.mac(body, k), got)
        return body if ok else None
