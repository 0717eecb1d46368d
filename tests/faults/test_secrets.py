"""Secrets never reach output (issue 14): --print-config with '@' in passwords, the Kafka
bad-query error, and password files for every URL secret (used for real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from hotkeyd.conn.kafka import parse_kafka_url
from hotkeyd.conn.redis import parse_redis_url
from hotkeyd.conn.urls import redact_url
from hotkeyd.errors import ConfigError
from hotkeyd.sources.monitor.conn import parse_monitor_url
from hotkeyd.testing import RedisServer, run_daemon

SECRET = "p@ss@w0rd/x"


@pytest.mark.parametrize(
    "url",
    [
        f"redis://user:{SECRET}@127.0.0.1:6379/0",
        f"redis-monitor://user:{SECRET}@127.0.0.1:6379",
        f"kafka://user:{SECRET}@k1:9092,k2:9092/topic?group=g",
        f"kafka://k1:9092/t?sasl_username=u&sasl_password={SECRET}",
    ],
)
def test_print_config_masks_passwords_with_at_signs(url: str) -> None:
    args = ["--redis-url", url] if url.startswith("redis://") else ["-s", url]
    out = run_daemon(*args, "--print-config", text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for part in ("p@ss", "ss@w0rd", "w0rd", SECRET):
        assert part not in out.stdout
    assert "***" in out.stdout
    json.loads(out.stdout)


def test_redaction_masks_up_to_the_last_at() -> None:
    assert redact_url("redis://u:p@ss@word@h:6379/0") == "redis://u:***@h:6379/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert redact_url("redis://u@h") == "redis://u@h"
    assert "s3" not in redact_url("kafka://h/t?sasl_password=s3@x&group=g")


@pytest.mark.parametrize("query", [f"sasl_password={SECRET}&&x=1", "s3cretvalue"])
def test_kafka_bad_query_error_has_no_secret(query: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_kafka_url(f"kafka://k:9092/t?{query}")
    assert "bad query string" in str(err.value)
    assert "p@ss" not in str(err.value) and "s3cret" not in str(err.value)


def test_password_files_for_every_url_secret(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    assert parse_redis_url(f"redis://u@h/0?password_file={pw}").password == SECRET
    assert parse_monitor_url(f"redis-monitor://u@h:1?password_file={pw}").redis.password == SECRET
    k = parse_kafka_url(f"kafka://u@k:9092/t?sasl_password_file={pw}&ssl_password_file={pw}")
    assert k.sasl_password == SECRET and k.ssl_password == SECRET
    with pytest.raises(ConfigError, match="not both"):
        parse_redis_url(f"redis://u:x@h/0?password_file={pw}")
    with pytest.raises(ConfigError, match="password file") as err:
        parse_redis_url(f"redis://u@h/0?password_file={tmp_path / 'missing'}")
    assert SECRET not in str(err.value)


@pytest.mark.integration
def test_daemon_authenticates_with_a_password_file(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", "hk", "on", f">{SECRET}", "~*", "&*", "+@all")
    admin.close()
    pw = tmp_path / "redis.pw"
    pw.write_text(SECRET + "\n")
    pw.chmod(0o600)
    url = f"redis://hk@127.0.0.1:{redis_server.port}/0?password_file={pw}"
    proc = run_daemon("--no-http", "--redis-url", url, input=b"k\n" * 100, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert SECRET not in err and "authentication" not in err.lower()
