"""Redis URL validation: good URLs become settings, bad ones one clear ConfigError line."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from hotkeyd.conn.redis import client_from_url, parse_redis_url, translate_redis_error
from hotkeyd.conn.urls import redact_url
from hotkeyd.errors import ConfigError, PublishError, UnreachableError
from hotkeyd.publish import RedisPublisher


def test_plain_url_with_db_and_timeouts() -> None:
    s = parse_redis_url("redis://cache.local:6380/3?socket_timeout=1.5&socket_connect_timeout=0.5")
    assert (s.host, s.port, s.db, s.tls) == ("cache.local", 6380, 3, False)
    assert (s.socket_timeout, s.socket_connect_timeout) == (1.5, 0.5)
    assert s.username is None and s.password is None


def test_acl_user_password_are_unquoted_and_hidden() -> None:
    s = parse_redis_url("redis://app%40x:p%3Ass%2Fw@h:1/0")
    assert s.username == "app@x" and s.password == "p:ss/w"
    assert "p:ss" not in repr(s) and "p%3Ass" not in s.display
    assert "***" in s.display


def test_password_only_auth() -> None:
    s = parse_redis_url("redis://:s3cret@h")
    assert s.username is None and s.password == "s3cret" and s.port == 6379 and s.db == 0


def test_tls_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    cert = tmp_path / "c.pem"
    key = tmp_path / "c.key"
    for f in (ca, cert, key):
        f.write_text("x")
    s = parse_redis_url(
        f"rediss://h:6390/2?ssl_ca_certs={ca}&ssl_certfile={cert}&ssl_keyfile={key}"
        "&ssl_cert_reqs=required&ssl_check_hostname=false"
    )
    assert s.tls and s.db == 2 and s.ssl_ca_certs == str(ca) and s.ssl_check_hostname is False
    kw = s.client_kwargs()
    assert kw["ssl"] is True and kw["ssl_ca_certs"] == str(ca) and kw["ssl_keyfile"] == str(key)


def test_unix_socket_url() -> None:
    s = parse_redis_url("unix:///run/redis.sock?db=4")
    assert s.unix_path == "/run/redis.sock" and s.db == 4
    assert s.client_kwargs()["unix_socket_path"] == "/run/redis.sock"


def test_client_from_url_builds_a_client_without_io() -> None:
    c = client_from_url("redis://u:p@127.0.0.1:1/5")
    kw = c.connection_pool.connection_kwargs
    assert (kw["host"], kw["port"], kw["db"], kw["username"], kw["password"]) == (
        "127.0.0.1",
        1,
        5,
        "u",
        "p",
    )
    c.close()


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("", "empty"),
        ("http://h:6379", "scheme"),
        ("h:6379", "scheme"),
        ("redis://", "missing host"),
        ("redis://h:0/0", "port"),
        ("redis://h:99999/0", "port"),
        ("redis://h:abc/0", "port"),
        ("redis://h/abc", "database index"),
        ("redis://h/-1", "database index"),
        ("redis://h?db=x", "database index"),
        ("redis://h?socket_timeout=fast", "socket_timeout"),
        ("redis://h?socket_timeout=-1", "socket_timeout"),
        ("redis://h?ssl_ca_cert=/x", "unknown option 'ssl_ca_cert'"),
        ("redis://h?db=1&db=2", "more than once"),
        ("redis://h?ssl_ca_certs=/x", "needs the rediss:// scheme"),
        ("rediss://h?ssl_ca_certs=/nonexistent/ca.pem", "does not exist"),
        ("rediss://h?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
        ("rediss://h?ssl_check_hostname=perhaps", "ssl_check_hostname"),
        ("unix://", "socket path"),
        ("redis://u:hunter2@h/x", "database index"),
    ],
)
def test_bad_urls_raise_one_line_config_error(url: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_redis_url(url)
    text = str(info.value)
    assert needle in text
    assert "\n" not in text
    assert "hunter2" not in text  # passwords never leak into messages
    # the publisher validates at construction, not on its first publish
    with pytest.raises(ConfigError):
        RedisPublisher(url)


def test_redact_url() -> None:
    assert redact_url("rediss://u:pw@h:1/0?x=1") == "rediss://u:***@h:1/0?x=1"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


def test_translate_redis_errors() -> None:
    where = "redis://u:secret@h:1/0"
    e = translate_redis_error(redis.exceptions.ConnectionError("refused"), where)
    assert isinstance(e, UnreachableError) and "secret" not in str(e) and "refused" in str(e)
    e = translate_redis_error(redis.exceptions.TimeoutError("slow"), where)
    assert isinstance(e, UnreachableError)
    e = translate_redis_error(redis.exceptions.AuthenticationError("WRONGPASS"), where)
    assert isinstance(e, PublishError) and "authentication failed" in str(e)
    e = translate_redis_error(redis.exceptions.NoPermissionError("NOPERM no publish"), where)
    assert isinstance(e, PublishError) and "permission" in str(e)
    e = translate_redis_error(redis.exceptions.ResponseError("WRONGTYPE"), where)
    assert isinstance(e, PublishError) and "WRONGTYPE" in str(e)
