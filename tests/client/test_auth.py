"""Message authentication (HMAC-SHA256, hotkeyd.protocol.auth): the shared vectors, and a real
daemon signing what a real subscriber verifies while forged messages are dropped."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from hotkeyd.client import Subscriber
from hotkeyd.errors import ConfigError
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from tests.service.daemon import Daemon

from .helpers import wait_until

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "spec" / "vectors" / "auth.json").read_text("utf-8")
)
KEY = VECTORS["key_utf8"].encode("utf-8")


@pytest.mark.parametrize("case", VECTORS["sign"], ids=[c["name"] for c in VECTORS["sign"]])
def test_sign_vectors(case: dict[str, str]) -> None:
    auth = MessageAuth([KEY])
    body = case["body"].encode("utf-8")
    assert auth.mac(body).decode() == case["mac_hex"]
    assert auth.sign(body).decode("utf-8") == case["signed"]
    assert auth.verify(case["signed"].encode("utf-8")) == body


@pytest.mark.parametrize("case", VECTORS["reject"], ids=[c["name"] for c in VECTORS["reject"]])
def test_reject_vectors(case: dict[str, str]) -> None:
    assert MessageAuth([KEY]).verify(case["signed"].encode("utf-8")) is None


def test_rotation_any_key_verifies_first_key_signs(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_bytes(b"new-key-0123456789abcdef\n\nold-key-0123456789abcdef\n")
    both = MessageAuth.from_file(str(f))
    old = MessageAuth([b"old-key-0123456789abcdef"])
    assert both.verify(old.sign(b'{"a":1}')) == b'{"a":1}'
    assert old.verify(both.sign(b'{"a":1}')) is None  # signs with the new key
    assert "key" not in repr(both).replace("key(s)", "")
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        MessageAuth([b"short"])
    with pytest.raises(ConfigError, match="auth key file"):
        MessageAuth.from_file(str(tmp_path / "missing"))
    assert MessageAuth.from_env({}) is None


@pytest.mark.integration
def test_daemon_signs_subscriber_verifies_and_drops_forgeries(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    ns = Namespace(prefix=f"hk-{unique}")
    keyfile = tmp_path / "hotkeyd.key"
    keyfile.write_bytes(KEY + b"\n")
    keyfile.chmod(0o600)
    r = redis.Redis.from_url(redis_server.url)
    args = ("--redis-url", redis_server.url, "--namespace", ns.prefix, "--window", "0.5")
    with Daemon(*args, "--auth-key-file", str(keyfile)) as d:
        verified = Subscriber(r, namespace=ns, auth=MessageAuth([KEY])).start()
        plain = Subscriber(r, namespace=ns).start()  # no key: reads signed messages too
        try:
            assert verified.wait_ready(10) and plain.wait_ready(10)
            d.feed_rate({b"signed-key": 3000.0}, seconds=1.5)
            assert wait_until(lambda: b"signed-key" in verified.hotset, timeout=10)
            assert wait_until(lambda: b"signed-key" in plain.hotset, timeout=10)
            forged = {
                "v": 1,
                "instance": "forger",
                "seq": 1,
                "ts": time.time(),
                "full": True,
                "hot": [{"key": "forged", "rate": 1.0, "rule": "r", "ttl_ms": 5000}],
                "cool": [],
            }
            r.publish(ns.channel, json.dumps(forged))
            forged_signed = MessageAuth([b"not-the-shared-key-at-all"]).sign(
                json.dumps(forged).encode()
            )
            r.publish(ns.channel, forged_signed)
            assert wait_until(lambda: verified.stats.unsigned >= 2, timeout=5)
            assert b"forged" not in verified.hotset
            assert wait_until(lambda: b"forged" in plain.hotset)  # what the key protects
            snap = r.get(next(iter(r.scan_iter(match=f"{{{ns.prefix}}}:snapshot:*"))))
            assert isinstance(snap, bytes)
            assert MessageAuth([KEY]).verify(snap) is not None  # snapshots are signed too
        finally:
            verified.stop()
            plain.stop()
            r.close()
