"""parse_kafka_url: options, security passthrough, and one-line errors for bad URLs."""

from __future__ import annotations

import pytest

from hotkeyd.conn.kafka import KafkaSettings, parse_kafka_url
from hotkeyd.errors import ConfigError


def test_defaults_and_topics() -> None:
    s = parse_kafka_url("kafka://broker:9092/topic1,topic2", env={})
    assert s.bootstrap == ("broker:9092",)
    assert s.topics == ("topic1", "topic2")
    assert (s.group, s.format, s.start, s.dlq_topic, s.scale) == (
        "hotkeyd",
        "reporter",
        "latest",
        None,
        1.0,
    )
    kw = s.consumer_kwargs()
    assert kw["enable_auto_commit"] is False
    assert kw["group_id"] == "hotkeyd"
    assert kw["auto_offset_reset"] == "latest"
    assert kw["security_protocol"] == "PLAINTEXT"
    assert "sasl_plain_password" not in kw


def test_default_failover_timing() -> None:
    """A crashed group member's partitions move after the session timeout plus a
    rebalance. tests/faults/test_group_failover.py times that takeover with a bound wide
    enough for shared cores (20 s), which a 10 s session would still pass (16-17 s): this
    pins the timing the bound and docs/kafka.md assume."""
    kw = parse_kafka_url("kafka://broker:9092/t?group=g&format=key", env={}).consumer_kwargs()
    assert kw["session_timeout_ms"] == 6_000  # the brokers' group.min.session.timeout.ms
    assert kw["heartbeat_interval_ms"] == 1_000
    assert kw["heartbeat_interval_ms"] * 3 <= kw["session_timeout_ms"]  # Kafka's rule


def test_query_options() -> None:
    s = parse_kafka_url(
        "kafka://a:1,b:2/t?group=g1&format=lines&start=earliest&dlq=bad&scale=4"
        "&session_timeout_ms=6000&max_poll_records=100",
        env={},
    )
    assert s.bootstrap == ("a:1", "b:2")
    assert (s.group, s.format, s.start, s.dlq_topic, s.scale) == (
        "g1",
        "lines",
        "earliest",
        "bad",
        4.0,
    )
    assert s.consumer_kwargs()["session_timeout_ms"] == 6000
    assert s.consumer_kwargs()["max_poll_records"] == 100


def test_rate_multiplier_alias() -> None:
    assert parse_kafka_url("kafka://b:1/t?rate_multiplier=3", env={}).scale == 3.0


def test_default_port_and_auto_alias() -> None:
    s = parse_kafka_url("kafka://broker/t?format=auto", env={})
    assert s.bootstrap == ("broker:9092",)
    assert s.format == "reporter"


def test_sasl_from_url_and_tls_scheme() -> None:
    s = parse_kafka_url(
        "kafkas://alice:s%40cret@broker:9093/t?sasl_mechanism=scram-sha-512&ssl_cafile=/ca.pem",
        env={},
    )
    kw = s.consumer_kwargs()
    assert kw["security_protocol"] == "SASL_SSL"
    assert kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "alice"
    assert kw["sasl_plain_password"] == "s@cret"
    assert kw["ssl_cafile"] == "/ca.pem"
    assert "s@cret" not in repr(s) and "s@cret" not in s.describe()
    assert s.producer_kwargs()["sasl_plain_password"] == "s@cret"


def test_sasl_plaintext_password_from_env() -> None:
    env = {"HOTKEYD_KAFKA_SASL_USERNAME": "bob", "HOTKEYD_KAFKA_SASL_PASSWORD": "pw"}
    s = parse_kafka_url("kafka://broker:9092/t?sasl_mechanism=PLAIN", env=env)
    kw = s.consumer_kwargs()
    assert kw["security_protocol"] == "SASL_PLAINTEXT"
    assert (kw["sasl_mechanism"], kw["sasl_plain_username"], kw["sasl_plain_password"]) == (
        "PLAIN",
        "bob",
        "pw",
    )


def test_mutual_tls_passthrough() -> None:
    s = parse_kafka_url(
        "kafka://broker:9093/t?security_protocol=SSL&ssl_cafile=/ca&ssl_certfile=/c&ssl_keyfile=/k"
        "&ssl_password=kp&ssl_check_hostname=false",
        env={},
    )
    kw = s.consumer_kwargs()
    assert kw["security_protocol"] == "SSL"
    assert (kw["ssl_cafile"], kw["ssl_certfile"], kw["ssl_keyfile"], kw["ssl_password"]) == (
        "/ca",
        "/c",
        "/k",
        "kp",
    )
    assert kw["ssl_check_hostname"] is False
    assert "sasl_plain_username" not in kw


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://broker/t", "must start with kafka://"),
        ("kafka://broker:9092/", "no topic"),
        ("kafka:///t", "no host"),
        ("kafka://broker:port/t", "bad bootstrap server"),
        ("kafka://broker:9092/t?format=xml", "unknown format"),
        ("kafka://broker:9092/t?start=yesterday", "start must be latest or earliest"),
        ("kafka://broker:9092/t?colour=red", "unknown option 'colour'"),
        ("kafka://broker:9092/t?scale=0", "scale must be > 0"),
        ("kafka://broker:9092/t?scale=x", "scale must be a number"),
        ("kafka://broker:9092/t?max_poll_records=many", "max_poll_records must be an integer"),
        (
            "kafka://broker:9092/t?security_protocol=SASL_SSL",
            "needs sasl_username and sasl_password",
        ),
        ("kafka://u:p@broker:9092/t?sasl_mechanism=GSSAPI", "sasl_mechanism 'GSSAPI'"),
        (
            "kafka://broker:9092/t?ssl_check_hostname=maybe",
            "ssl_check_hostname must be true or false",
        ),
    ],
)
def test_bad_urls_give_one_clear_line(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_kafka_url(url, env={})
    msg = str(info.value)
    assert fragment in msg
    assert "\n" not in msg
    assert msg.startswith("kafka: ")


def test_with_options_revalidates() -> None:
    s = parse_kafka_url("kafka://b:1/t", env={})
    assert s.with_options(format="key").format == "key"
    with pytest.raises(ConfigError):
        s.with_options(format="nope")
    with pytest.raises(ConfigError):
        s.with_options(no_such_field=1)
    assert isinstance(s, KafkaSettings)
