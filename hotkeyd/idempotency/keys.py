"""Idempotency keys: validation, composite and gateway keys, fixed-length hashing.

Client input reaches Redis only as a SHA-256 digest (``record_digest``), so a key of
any length costs the same fixed-size Redis name, and odd bytes in a key can never
collide with hotkeyd's own names. What a client may send is still checked first, with
one clear error per problem (:class:`~hotkeyd.idempotency.errors.IdempotencyKeyError`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import quote

from hotkeyd.idempotency.errors import IdempotencyKeyError
from hotkeyd.protocol import limits

__all__ = [
    "DIGEST_HEX",
    "MAX_KEY_LENGTH",
    "IdempotencyNames",
    "check_key",
    "fingerprint",
    "gateway_key",
    "operation_key",
    "record_digest",
]

MAX_KEY_LENGTH = limits.IDEMPOTENCY_KEY_CHARS_MAX  # the IETF draft's are short; UUIDs are 36
DIGEST_HEX = 32  # 128 bits of SHA-256: collisions are not a practical concern
MAX_PART = 100  # a key part longer than this (encoded) is replaced by "#<its digest>"
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")  # kept as is


@dataclass(frozen=True)
class IdempotencyNames:
    """The guard's Redis names under a deployment ``prefix`` (``Namespace.prefix``)."""

    prefix: str = "hotkeyd"

    def record(self, digest: str) -> str:
        """Record of one idempotency key (``digest``: the fixed-length key hash)."""
        return f"{self.prefix}:idem:{digest}"

    @property
    def audit(self) -> str:
        """Capped stream of the guard's transitions."""
        return f"{self.prefix}:idem-audit"


def check_key(key: object, max_length: int = MAX_KEY_LENGTH) -> str:
    """Return ``key`` if it is a usable idempotency key, else raise a clear error.

    A key is 1..``max_length`` printable ASCII characters (what an HTTP header field
    can carry unambiguously; the IETF draft makes it a Structured Field string).

    Raises:
        TypeError: not a str.
        IdempotencyKeyError: empty, too long, or not printable ASCII.
    """
    if not isinstance(key, str):
        raise TypeError(f"an idempotency key must be a str, not {type(key).__name__}")
    if not key:
        raise IdempotencyKeyError("idempotency key is empty")
    if len(key) > max_length:
        raise IdempotencyKeyError(
            f"idempotency key is {len(key)} characters; at most {max_length} are allowed"
        )
    if not (key.isascii() and key.isprintable()):
        raise IdempotencyKeyError("idempotency key must be printable ASCII (0x20-0x7E)")
    return key


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:  # length-prefixed, so ("ab", "c") and ("a", "bc") differ
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()[:DIGEST_HEX]


def _bytes(part: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(part, str):
        return part.encode("utf-8")
    if isinstance(part, (bytes, bytearray, memoryview)):
        return bytes(part)
    raise TypeError(f"fingerprint parts must be bytes or str, not {type(part).__name__}")


def fingerprint(*parts: bytes | bytearray | memoryview | str) -> str:
    """A fixed-length fingerprint of a request (e.g. method, path, body).

    The guard compares fingerprints to tell a retry (same request) from a client that
    reused a key for a different request (a mismatch, never a replay).
    """
    return _digest(*(_bytes(p) for p in parts))


def record_digest(scope: str, key: str) -> str:
    """The fixed-length name of ``key`` within ``scope`` (what Redis and the store see)."""
    return _digest(scope.encode("utf-8"), key.encode("utf-8"))


def operation_key(op_type: str, op_id: str | int, version: int = 1) -> str:
    """A composite key for one business operation: ``<type>:v<version>:<id>``.

    Bump ``version`` when the operation's meaning changes, so records written by the old
    code are not replayed for the new one. Type and id are percent-encoded where they
    are not printable ASCII (a ``%`` included), and an id longer than :data:`MAX_PART`
    once encoded is replaced by ``#`` and its digest, so any id gives a key the guard
    accepts.

    Raises:
        IdempotencyKeyError: empty type or id, a ':' in the type, or a negative version.
    """
    if not op_type or ":" in op_type:
        raise IdempotencyKeyError(f"operation type must be non-empty without ':', got {op_type!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise IdempotencyKeyError(f"version must be an int >= 0, got {version!r}")
    op = str(op_id)
    if not op:
        raise IdempotencyKeyError("operation id is empty")
    return f"{_part(op_type, _SAFE)}:v{version}:{_part(op, _SAFE)}"


def gateway_key(user: str, path: str, body: bytes | str) -> str:
    """The short-TTL gateway dedup key ``idem:{user}:{path}:{hash(body)}``.

    For clients that send no Idempotency-Key: two identical requests from one user to
    one path within the TTL are treated as one. User and path are percent-encoded (the
    key stays printable ASCII), either one longer than :data:`MAX_PART` once encoded is
    replaced by ``#`` and its digest, and the body is hashed: whatever the client sends,
    the key is at most 239 characters, so the guard always accepts it.
    """
    return f"idem:{_part(user, '')}:{_part(path, '/')}:{fingerprint(body)}"


def _part(text: str, safe: str) -> str:
    """``text`` percent-encoded (printable ASCII), or ``#<digest>`` if that is long.

    Neither form can be taken for the other: encoding never yields a bare ``#``.
    """
    out = quote(text, safe=safe.replace("#", ""))
    return out if len(out) <= MAX_PART else "#" + fingerprint(text)
