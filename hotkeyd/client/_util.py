"""Key encoding shared by the client modules."""

from __future__ import annotations

from typing import Any

__all__ = ["key_bytes"]


def key_bytes(key: Any) -> bytes:
    """Encode a key the way redis-py does, so the hot-set lookup matches the wire key.

    redis-py sends ``str`` as UTF-8 and numbers as their ``repr``; the daemon reports
    the bytes it saw, so both sides meet on bytes.
    """
    cls = key.__class__
    if cls is bytes:
        return key
    if cls is str:
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, bool):
        raise TypeError("a Redis key cannot be a bool")
    if isinstance(key, (int, float)):
        return repr(key).encode("ascii")
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"a Redis key must be bytes, str, int or float, not {cls.__name__}")
