"""Internal key identity ``(db, key)`` encoded as one bytes string for the sketches.

Keys of database 0 (every source but MONITOR, and most MONITOR traffic) go into the
sketches unchanged, so the C fast path (``update_lines`` on the source's buffer)
needs no copy. Keys of another database get a tag in front::

    b"\\x00hkdb" + b"<db in decimal>" + b"\\x00" + key

Caveats (documented in docs/detection.md): a database-0 key that itself starts with
the tag would be read back as belonging to that database; and the tag counts
against ``max_key_len`` (the sketch bounds the stored identity), so keys of db != 0
have up to ``len(tag)`` bytes less room before they are rejected as oversized.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["decode_ident", "encode_ident", "encode_keys", "encode_lines", "tag"]

_TAG = b"\x00hkdb"


def tag(db: int) -> bytes:
    """The prefix that marks keys of database ``db`` (empty for db 0)."""
    return b"" if db == 0 else b"%s%d\x00" % (_TAG, db)


def encode_ident(key: bytes, db: int = 0) -> bytes:
    """The sketch identity of ``key`` in database ``db``."""
    return key if db == 0 else tag(db) + key


def encode_keys(keys: Sequence[bytes], db: int) -> Sequence[bytes]:
    """Identities of ``keys`` in ``db`` (the same sequence object for db 0)."""
    if db == 0:
        return keys
    t = tag(db)
    return [t + k for k in keys]


def encode_lines(buf: bytes | bytearray | memoryview, db: int) -> bytes | bytearray | memoryview:
    """Prefix every non-empty line of ``buf`` with the tag of ``db`` (``buf`` for db 0).

    Splits on ``\\n`` only (a ``\\r`` before it stays and the sketch's line parser
    drops it); keys may contain any other control byte.
    """
    if db == 0:
        return buf
    t = tag(db)
    return b"\n".join(t + line for line in bytes(buf).split(b"\n") if line)


def decode_ident(ident: bytes) -> tuple[int, bytes]:
    """Return ``(db, key)`` of a sketch identity."""
    if ident.startswith(_TAG):
        end = ident.find(b"\x00", len(_TAG))
        digits = ident[len(_TAG) : end]
        if end > len(_TAG) and digits.isdigit():
            return int(digits), ident[end + 1 :]
    return 0, ident
