"""The HTTP endpoint: /metrics, /healthz (200/503), /topk, 404, loopback by default."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from hotkeyd.daemon.http import DEFAULT_HOST, DEFAULT_PORT, HttpServer
from hotkeyd.errors import ConfigError, UnreachableError
from hotkeyd.metrics import Metrics


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


class Health:
    def __init__(self) -> None:
        self.ok = True

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        if self.ok:
            return True, {"status": "ok", "instance": "i-1", "reasons": []}
        return False, {"status": "unhealthy", "instance": "i-1", "reasons": ["publisher unhealthy"]}


@pytest.fixture
def server() -> Iterator[tuple[HttpServer, Metrics, Health, list[int | None]]]:
    metrics = Metrics()
    health = Health()
    calls: list[int | None] = []

    def topk(n: int | None = None) -> dict[str, Any]:
        calls.append(n)
        return {
            "instance": "i-1",
            "hot": [{"key": "a", "rate": 5.0}],
            "top": [{"key": "a", "rate": 5.0}],
        }

    srv = HttpServer(metrics.registry, port=0, health=health, topk=topk)
    srv.start()
    try:
        yield srv, metrics, health, calls
    finally:
        srv.close()


def test_defaults_are_loopback_9108() -> None:
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 9108)


def test_binds_loopback_with_ephemeral_port(
    server: tuple[HttpServer, Metrics, Health, list[int | None]],
) -> None:
    srv, *_ = server
    assert srv.host == "127.0.0.1" and srv.port > 0
    assert srv._server.server_address[0] == "127.0.0.1"


def test_metrics_endpoint(server: tuple[HttpServer, Metrics, Health, list[int | None]]) -> None:
    srv, metrics, _, _ = server
    metrics.publish_failures.labels("redis").inc(3)
    status, ctype, body = get(srv.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert b'hotkeyd_publish_failures_total{publisher="redis"} 3.0' in body


def test_healthz_200_then_503(server: tuple[HttpServer, Metrics, Health, list[int | None]]) -> None:
    srv, _, health, _ = server
    status, ctype, body = get(srv.url + "/healthz")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body)["status"] == "ok"
    health.ok = False
    status, _, body = get(srv.url + "/healthz")
    doc = json.loads(body)
    assert (
        status == 503 and doc["status"] == "unhealthy" and doc["reasons"] == ["publisher unhealthy"]
    )


def test_healthz_callable_that_raises_is_503_not_a_crash() -> None:
    def broken() -> tuple[bool, dict[str, Any]]:
        raise RuntimeError("boom")

    with HttpServer(Metrics().registry, port=0, health=broken) as srv:
        status, _, body = get(srv.url + "/healthz")
        assert status == 503 and "boom" in json.loads(body)["reasons"][0]
        status, _, _ = get(srv.url + "/metrics")  # the server keeps serving
        assert status == 200


def test_topk_and_n_parameter(server: tuple[HttpServer, Metrics, Health, list[int | None]]) -> None:
    srv, _, _, calls = server
    status, ctype, body = get(srv.url + "/topk")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body)["hot"][0]["key"] == "a"
    assert get(srv.url + "/topk?n=5")[0] == 200
    assert calls == [None, 5]
    assert get(srv.url + "/topk?n=abc")[0] == 400
    assert calls == [None, 5]


def test_unknown_path_is_404(server: tuple[HttpServer, Metrics, Health, list[int | None]]) -> None:
    srv, *_ = server
    status, _, body = get(srv.url + "/nope")
    assert status == 404 and "/metrics" in json.loads(body)["endpoints"]


def test_topk_absent_without_callable() -> None:
    with HttpServer(Metrics().registry, port=0) as srv:
        assert get(srv.url + "/topk")[0] == 404
        assert get(srv.url + "/healthz")[0] == 200


def test_no_request_lines_on_stderr(
    server: tuple[HttpServer, Metrics, Health, list[int | None]], capfd: pytest.CaptureFixture[str]
) -> None:
    srv, *_ = server
    for path in ("/metrics", "/healthz", "/nope"):
        get(srv.url + path)
    assert "GET /" not in capfd.readouterr().err


def test_close_releases_port() -> None:
    srv = HttpServer(Metrics().registry, port=0)
    srv.start()
    port = srv.port
    srv.close()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))  # free again


def test_port_in_use_and_bad_port_are_clear_errors() -> None:
    with (
        HttpServer(Metrics().registry, port=0) as srv,
        pytest.raises(UnreachableError, match="cannot listen"),
    ):
        HttpServer(Metrics().registry, port=srv.port)
    with pytest.raises(ConfigError):
        HttpServer(Metrics().registry, port=70000)
