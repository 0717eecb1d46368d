"""The public API of hotkeyd.client stays honest and sorted."""

from __future__ import annotations

import hotkeyd.client as client


def test_all_is_sorted_and_resolves() -> None:
    assert client.__all__ == sorted(client.__all__)
    for name in client.__all__:
        assert getattr(client, name) is not None


def test_key_bytes_matches_redis_py_encoding() -> None:
    import redis

    from hotkeyd.protocol.keys import key_bytes

    enc = redis.Redis().get_encoder()
    for key in ["text", "ünï", b"\xff\x00", 42, 1.5]:
        assert key_bytes(key) == enc.encode(key)
