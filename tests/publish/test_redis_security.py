"""AUTH, ACL users and TLS (rediss://) against real redis-servers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from hotkeyd.conn.redis import check_redis, connect
from hotkeyd.errors import PublishError, UnreachableError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import HotEntry, Namespace
from hotkeyd.publish import RedisPublisher
from hotkeyd.testing import RedisServer, free_port, wait_for_port
from tests.publish.conftest import IN_CI, Subscriber, sample, wait_until

pytestmark = pytest.mark.integration


def hot(key: bytes) -> HotEntry:
    return HotEntry(key=key, rate=10.0, rule="r", ttl_ms=1000)


def _round_trip(
    url: str, sub_url: str, ns: Namespace, subscribers: Callable[[str, str], Subscriber]
) -> None:
    metrics = Metrics()
    sub = subscribers(sub_url, ns.channel)
    pub = RedisPublisher(url, ns, instance="sec", metrics=metrics, heartbeat=0.2)
    try:
        pub.start()
        assert sub.get().full
        pub.publish([hot(b"\x00secure\xff")], [], [])
        assert sub.get().hot[0].key == b"\x00secure\xff"
        wait_until(lambda: pub.healthy, what="healthy")
    finally:
        pub.close(timeout=2.0)
    assert sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") == 0


def _bad_credentials(url: str, needle: str) -> None:
    metrics = Metrics()
    pub = RedisPublisher(
        url, Namespace(), instance="bad", metrics=metrics, heartbeat=0.2, backoff_cap=0.2
    )
    try:
        pub.start()
        for _ in range(20):
            pub.publish([hot(b"k")], [], [])  # never raises into the caller
        wait_until(
            lambda: sample(metrics, "hotkeyd_publish_failures_total", publisher="redis") >= 2,
            what="auth failures counted (and retried)",
        )
        assert not pub.healthy
        assert pub.last_error is not None and needle in pub.last_error
        assert "\n" not in pub.last_error
    finally:
        pub.close(timeout=1.0)


def test_requirepass_good_and_bad(
    make_redis: Callable[..., RedisServer],
    unique: str,
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    rs = make_redis(["--requirepass", "s3cret pass"])
    good = f"redis://:s3cret%20pass@127.0.0.1:{rs.port}/0"
    _round_trip(good, good, Namespace(prefix=f"a{unique}"), subscribers)
    bad = f"redis://:wrong@127.0.0.1:{rs.port}/0"
    _bad_credentials(bad, "authentication failed")
    _bad_credentials(f"redis://127.0.0.1:{rs.port}/0", "authentication")  # no password at all
    with pytest.raises(PublishError, match="authentication failed") as info:
        connect(bad)
    assert "wrong" not in str(info.value)  # the password is masked


def test_acl_user_good_bad_and_missing_permission(
    make_redis: Callable[..., RedisServer],
    unique: str,
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    rs = make_redis()
    admin = redis.Redis(host="127.0.0.1", port=rs.port)
    prefix = f"p{unique}"
    # exactly the commands the publisher needs, on its own keys and channel
    admin.execute_command(
        "ACL",
        "SETUSER",
        "hotkeyd",
        "on",
        ">pub-pw",
        f"~{{{prefix}}}:*",
        f"&{prefix}:*",
        "+ping",
        "+multi",
        "+exec",
        "+set",
        "+pexpire",
        "+zadd",
        "+publish",
        "+del",
        "+zrem",
        "+zremrangebyscore",
        "+hello",
    )
    admin.execute_command(
        "ACL", "SETUSER", "reader", "on", ">read-pw", "~*", "&*", "+@read", "+ping", "+hello"
    )
    admin.execute_command("ACL", "SETUSER", "default", "off")
    ns = Namespace(prefix=prefix)
    sub_url = f"redis://reader:read-pw@127.0.0.1:{rs.port}/0"
    admin_sub = f"redis://hotkeyd:pub-pw@127.0.0.1:{rs.port}/0"
    admin.execute_command("ACL", "SETUSER", "reader", "+subscribe", "+pubsub|numsub")
    _round_trip(admin_sub, sub_url, ns, subscribers)
    _bad_credentials(f"redis://hotkeyd:nope@127.0.0.1:{rs.port}/0", "authentication failed")
    # a valid user that may not PUBLISH: one clear line naming the permission problem
    _bad_credentials(f"redis://reader:read-pw@127.0.0.1:{rs.port}/0", "permission")
    admin.close()


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        if IN_CI:
            pytest.fail("openssl is required in CI for the TLS test")
        pytest.skip("openssl not installed")
    return path


def _make_certs(tmp: Path) -> dict[str, Path]:
    """Throwaway CA, server cert (for 127.0.0.1) and client cert."""
    ssl_bin = _openssl()

    def run(*args: str) -> None:
        subprocess.run([ssl_bin, *args], cwd=tmp, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=hotkeyd test CA",
    )
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
        )
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        )
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "other.key",
        "-out",
        "other.crt",
        "-days",
        "1",
        "-subj",
        "/CN=some other CA",
    )
    return {
        n: tmp / n
        for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key", "other.crt")
    }


def _tls_server(
    make_redis: Callable[..., RedisServer], certs: dict[str, Path], auth_clients: bool
) -> int:
    tls_port = free_port()
    args = [
        "--tls-port",
        str(tls_port),
        "--tls-cert-file",
        str(certs["server.crt"]),
        "--tls-key-file",
        str(certs["server.key"]),
        "--tls-ca-cert-file",
        str(certs["ca.crt"]),
        "--tls-auth-clients",
        "yes" if auth_clients else "no",
    ]
    try:
        make_redis(args)
        wait_for_port(tls_port, timeout=5)
    except (TimeoutError, OSError) as exc:
        if IN_CI:
            pytest.fail(f"redis-server could not serve TLS: {exc}")
        pytest.skip(f"this redis-server build has no TLS: {exc}")
    return tls_port


def test_tls_with_ca_and_client_certificates(
    make_redis: Callable[..., RedisServer],
    tmp_path: Path,
    unique: str,
    subscribers: Callable[[str, str], Subscriber],
) -> None:
    certs = _make_certs(tmp_path)
    port = _tls_server(make_redis, certs, auth_clients=True)
    url = (
        f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs['ca.crt']}"
        f"&ssl_certfile={certs['client.crt']}&ssl_keyfile={certs['client.key']}"
    )
    info = check_redis(url)
    assert str(info.get("redis_version", "")).startswith("7")
    ns = Namespace(prefix=f"tls{unique}")
    sub = subscribers(url, ns.channel)  # the subscriber also goes through TLS with a client cert
    pub = RedisPublisher(url, ns, instance="tls", heartbeat=0.2)
    try:
        pub.start()
        pub.publish([hot(b"over-tls")], [], [])
        msgs = sub.until(lambda m: any(e.key == b"over-tls" for e in m.hot))
        assert msgs[0].full
        assert pub.healthy
    finally:
        pub.close(timeout=2.0)


def test_tls_wrong_ca_is_a_clear_unreachable_error(
    make_redis: Callable[..., RedisServer], tmp_path: Path
) -> None:
    certs = _make_certs(tmp_path)
    port = _tls_server(make_redis, certs, auth_clients=False)
    with pytest.raises(UnreachableError) as info:
        connect(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs['other.crt']}")
    assert "certificate" in str(info.value).lower() and "\n" not in str(info.value)
    assert check_redis(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs['ca.crt']}")


def test_unreachable_check_is_one_line() -> None:
    with pytest.raises(UnreachableError) as info:
        check_redis(f"redis://127.0.0.1:{free_port()}/0", timeout=1.0)
    assert "unreachable" in str(info.value) and "\n" not in str(info.value)
