"""One key -> bytes rule (hotkeyd.protocol.keys) for the client cache, the reporter and the sketch."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from hotkeyd.client.reporter import Reporter
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.sketch import _sketch_py


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"\xff\x00", b"\xff\x00"),
        (bytearray(b"ab"), b"ab"),
        (memoryview(b"mv"), b"mv"),
        ("ünï", "ünï".encode()),
        (42, b"42"),
        (-7, b"-7"),
        (1.5, b"1.5"),
        (1e20, b"1e+20"),
    ],
)
def test_the_rule_matches_what_redis_py_sends(key: Any, expected: bytes) -> None:
    assert key_bytes(key) == expected
    assert key_bytes(key) == redis.Redis().get_encoder().encode(key)


@pytest.mark.parametrize("key", [True, None, object(), ["a"]])
def test_non_keys_are_type_errors(key: Any) -> None:
    with pytest.raises(TypeError):
        key_bytes(key)


def test_a_lone_surrogate_is_an_error_everywhere() -> None:
    with pytest.raises(UnicodeEncodeError):
        key_bytes("a\ud800")
    sk = _sketch_py.HeavyKeeper(k=4, memory=65536)
    with pytest.raises(UnicodeEncodeError):
        sk.update("a\ud800")


def test_the_reporter_counts_keys_as_the_cache_looks_them_up() -> None:
    """It used to send str keys with surrogatepass and bools as b"True"."""
    rep = Reporter("127.0.0.1:1", "unused", producer=object(), flush_interval=60)
    try:
        out = rep._normalize({"k": 1, b"k": 2, 42: 1, b"42": 1, "a\ud800": 3, True: 1})
        assert out == {b"k": 3, b"42": 2}
        assert rep.dropped == 4
    finally:
        rep._stop.set()
