"""Keys and bad input: one clear error per problem."""

from __future__ import annotations

import pytest
import redis

from hotkeyd.errors import ClientError
from hotkeyd.idempotency import (
    IdempotencyGuard,
    check_key,
    fingerprint,
    gateway_key,
    operation_key,
)
from hotkeyd.idempotency.errors import IdempotencyKeyError


@pytest.mark.parametrize(
    ("key", "match"),
    [("", "empty"), ("x" * 256, "at most 255"), ("caf\u00e9", "ASCII"), ("a\nb", "ASCII")],
)
def test_bad_keys(key: str, match: str) -> None:
    with pytest.raises(IdempotencyKeyError, match=match):
        check_key(key)
    assert issubclass(IdempotencyKeyError, ValueError)


def test_key_type() -> None:
    with pytest.raises(TypeError):
        check_key(b"bytes")
    assert check_key("x" * 255) == "x" * 255


def test_guard_checks_keys_before_redis(r: redis.Redis) -> None:
    guard = IdempotencyGuard(r, max_key_length=8)
    with pytest.raises(IdempotencyKeyError, match="at most 8"):
        guard.begin("123456789", b"")
    assert r.dbsize() == 0


def test_decode_responses_client_is_refused(r: redis.Redis) -> None:
    dec = redis.Redis(
        connection_pool=redis.ConnectionPool(
            **{**r.connection_pool.connection_kwargs, "decode_responses": True}
        )
    )
    with pytest.raises(ClientError, match="decode_responses"):
        IdempotencyGuard(dec)


def test_operation_key() -> None:
    assert operation_key("charge", "o-1") == "charge:v1:o-1"
    assert operation_key("charge", 42, version=3) == "charge:v3:42"
    for bad in (("", "x"), ("a:b", "x"), ("t", "")):
        with pytest.raises(IdempotencyKeyError):
            operation_key(*bad)
    with pytest.raises(IdempotencyKeyError):
        operation_key("t", "x", version=-1)


def test_gateway_key_is_ascii_and_hashes_the_body() -> None:
    k = gateway_key("us\u00e9r:1", "/order", b'{"sku":1}')
    check_key(k)
    assert k.startswith("idem:us%C3%A9r%3A1:/order:")
    assert k != gateway_key("us\u00e9r:1", "/order", b'{"sku":2}')
    assert k == gateway_key("us\u00e9r:1", "/order", '{"sku":1}')


def test_fingerprint_is_fixed_length_and_unambiguous() -> None:
    assert len(fingerprint(b"x" * 100_000)) == 32
    assert fingerprint("ab", "c") != fingerprint("a", "bc")
    with pytest.raises(TypeError):
        fingerprint(1)  # type: ignore[arg-type]


def test_any_operation_id_gives_a_key_the_guard_accepts() -> None:
    assert operation_key("charge", "order 7/a:b") == "charge:v1:order 7/a:b"  # ASCII as is
    k = operation_key("charge", "caf\u00e9-\u8ba2\u5355")
    assert check_key(k) == k and k.startswith("charge:v1:caf%C3%A9-")
    assert operation_key("t", "%C3%A9") != operation_key("t", "\u00e9")  # "%" is encoded too
    long = operation_key("t", "x" * 5000)
    assert check_key(long) == long and long != operation_key("t", "x" * 5001)
    assert long.startswith("t:v1:#") and operation_key("t", "#" * 3) == "t:v1:%23%23%23"


def test_gateway_key_is_bounded_whatever_the_client_sends() -> None:
    user, path = "\u00fc" * 300, "/p/" + "\u00e9" * 2000
    k = gateway_key(user, path, b"x" * 100_000)
    assert check_key(k) == k and len(k) <= 239
    assert k != gateway_key(user, path + "x", b"x" * 100_000)
    assert k != gateway_key(user + "x", path, b"x" * 100_000)
    worst = gateway_key("%" * 33, "/" + "%" * 33, b"")  # 99 and 100 encoded: kept readable
    assert len(worst) <= 239 and "#" not in worst
