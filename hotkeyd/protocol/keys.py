"""What bytes a key is: the one rule every part of hotkeyd (and every client) follows.

It mirrors what redis-py sends to Redis, so the bytes the daemon sees (MONITOR, the
reporter's counts) are the bytes an app's hot set and cache look up:

- ``bytes``, ``bytearray``, ``memoryview``: as they are;
- ``str``: UTF-8, strict (a lone surrogate is an error, as in redis-py);
- ``int``: decimal ASCII (``str(i)``); ``float``: ``repr(f)``;
- ``bool`` and anything else: :class:`TypeError`.

A key is identified by ``(bytes, db)``; on the wire it travels as
:func:`hotkeyd.protocol.wire.encode_key` writes it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["key_bytes"]


def key_bytes(key: Any) -> bytes:
    """The bytes of ``key`` (see the module docstring for the rule).

    Raises:
        TypeError: ``key`` is a bool or not a bytes-like, str, int or float.
        UnicodeEncodeError: ``key`` is a str that is not valid Unicode (lone surrogate).
    """
    cls = key.__class__
    if cls is bytes:
        return key
    if cls is str:
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bool):
        raise TypeError("a Redis key cannot be a bool")
    if isinstance(key, int):
        return int.__repr__(key).encode("ascii")
    if isinstance(key, float):
        return float.__repr__(key).encode("ascii")
    raise TypeError(f"a Redis key must be bytes, str, int or float, not {cls.__name__}")
