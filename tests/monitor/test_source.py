"""The MONITOR source against a real redis-server, driven by redis-py and redis-benchmark."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from typing import Any

import pytest
import redis

from hotkeyd.errors import ConfigError, MonitorError, MonitorPermissionError
from hotkeyd.metrics import Metrics
from hotkeyd.sources.monitor.conn import parse_cluster_nodes
from hotkeyd.sources.monitor.source import MonitorSource, parse_monitor_url
from hotkeyd.testing import RedisServer, free_port

from .helpers import Tally, metric, paced_load, url

pytestmark = pytest.mark.integration


def benchmark(rs: RedisServer, *args: str) -> subprocess.Popen[bytes]:
    exe = shutil.which("redis-benchmark")
    assert exe, "redis-benchmark is required (apt-get install redis-tools)"
    return subprocess.Popen(
        [exe, "-p", str(rs.port), "-q", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


# ------------------------------------------------------------------ URLs


def test_parse_monitor_url_forms() -> None:
    t = parse_monitor_url("redis-monitor://tap:s%40cret@db.internal:7000?cluster=no")
    assert (t.redis.host, t.redis.port, t.redis.username, t.redis.password) == (
        "db.internal",
        7000,
        "tap",
        "s@cret",
    )
    assert t.cluster == "no" and not t.redis.tls and "s@cret" not in t.display
    assert parse_monitor_url("redis-monitor+tls://h:6380").redis.tls
    assert parse_monitor_url("rediss-monitor://h?ssl_cert_reqs=none").redis.ssl_cert_reqs == "none"
    assert parse_monitor_url("redis-monitor://h").redis.port == 6379


@pytest.mark.parametrize(
    "bad",
    [
        "redis://h:6379",
        "redis-monitor://h:99999",
        "redis-monitor://:pw@h/3",
        "redis-monitor://h?cluster=maybe",
        "redis-monitor://h?bogus=1",
        "redis-monitor://h?ssl_cert_reqs=none",
        "h:6379",
    ],
)
def test_parse_monitor_url_rejects(bad: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_monitor_url(bad)
    msg = str(ei.value)
    assert "\n" not in msg and "pw" not in msg


def test_source_rejects_bad_options(metrics: Metrics) -> None:
    with pytest.raises(ConfigError):
        MonitorSource(["redis-monitor://h"], duty=0, metrics=metrics)
    with pytest.raises(ConfigError):
        MonitorSource([], metrics=metrics)


def test_cluster_nodes_parsing() -> None:
    text = (
        "a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n"
        "b2 10.0.0.2:7001@17001,host-b master - 0 0 2 connected 5461-10922\n"
        "c3 10.0.0.3:7002@17002 slave a1 0 0 1 connected\n"
        "d4 10.0.0.4:7003@17003 master,fail - 0 0 3 disconnected 10923-16383\n"
        "e5 :0@0 myself,master - 0 0 0 connected\n"
        "f6 [::1]:7004@17004 master - 0 0 4 connected\n"
    )
    assert parse_cluster_nodes(text, "seed") == [
        ("10.0.0.1", 7000),
        ("10.0.0.2", 7001),
        ("::1", 7004),
    ]


# ------------------------------------------------------------------ keys from real traffic


def test_real_commands_yield_exact_keys(any_redis_server: RedisServer, source_factory: Any) -> None:
    redis_server = any_redis_server  # every flavor: its MONITOR format and ACLs
    src = source_factory([url(redis_server)])
    src.start()
    r = redis.Redis(port=redis_server.port)
    weird = [b"with space", b'with "quotes"', b"\x00\xff\r\n\\bin", "ключ".encode()]
    for k in weird:
        r.set(k, b"v")
        r.get(k)
    r.eval("redis.call('get', KEYS[1]); return redis.call('set', KEYS[2], 'x')", 2, "ev1", "ev2")
    lib = "#!lua name=t\nredis.register_function('f', function(k, a) return redis.call('get', k[1]) end)"
    r.execute_command("FUNCTION", "LOAD", lib)
    r.execute_command("FCALL", "f", 1, "fk")
    p = r.pipeline(transaction=True)
    p.set("m1", 1).incr("m2").get("m3")  # type: ignore[union-attr]
    p.execute()
    r.xadd("st", {"f": "v"})
    r.xread({"st": "0", "st2": "0"})
    r.rpush("lst", 3, 1, 2)
    r.sort("lst", by="w_*", get=["#"], store="sorted")
    r.execute_command("MIGRATE", "127.0.0.1", "1", "", "0", "100", "KEYS", "mk1", "mk2")
    r.ping()
    r7 = redis.Redis(port=redis_server.port, db=7)
    r7.get("in7")
    r7.set("in7", 1)

    want_writes = {
        (0, b"ev1"): 1,
        (0, b"ev2"): 1,
        (0, b"fk"): 1,  # FCALL keys are RW by the server's key spec
        (0, b"m1"): 1,
        (0, b"m2"): 1,
        (0, b"st"): 1,
        (0, b"lst"): 1,
        (0, b"sorted"): 1,
        (0, b"mk1"): 1,
        (0, b"mk2"): 1,
        (7, b"in7"): 1,
        **{(0, k): 1 for k in weird},
    }
    want_reads = {
        (0, b"m3"): 1,
        (0, b"st"): 1,
        (0, b"st2"): 1,
        (0, b"lst"): 1,
        (7, b"in7"): 1,
        **{(0, k): 1 for k in weird},
    }
    tally = Tally()
    assert tally.pump(src, lambda t: t.total.get((7, b"in7"), 0) >= 2)
    for key, n in want_writes.items():
        assert tally.writes.get(key) == n, key
    for key, n in want_reads.items():
        assert tally.reads(*key) == n, key
    expected_keys = set(want_writes) | set(want_reads)
    assert set(tally.total) == expected_keys  # nothing else: patterns, script lines, own cmds
    assert (0, b"w_*") not in tally.total


def test_hot_key_buried_in_uniform_background(
    redis_server: RedisServer, source_factory: Any
) -> None:
    src = source_factory([url(redis_server)])
    src.start()
    bg = benchmark(redis_server, "-t", "get,set", "-r", "20000", "-n", "60000", "-c", "4")
    r = redis.Redis(port=redis_server.port)
    for _ in range(1500):
        r.get("hot:item:42")
    bg.wait(60)
    tally = Tally()
    tally.pump(src, lambda t: False, timeout=1.5)
    hot = tally.total.get((0, b"hot:item:42"), 0)
    background = sorted(v for (db, k), v in tally.total.items() if k != b"hot:item:42")
    assert hot == 1500
    assert len(background) > 5000  # the uniform background really is there
    assert background[-1] * 20 < hot  # the hot key stands out by far


def test_duty_cycle_scales_rates(redis_server: RedisServer, source_factory: Any) -> None:
    # A steady load from another process; over 5 one-second periods the scaled count
    # must match the server's own count of GETs within 25% (docs/monitor.md).
    r = redis.Redis(port=redis_server.port)
    load = paced_load(redis_server.port, 2000, 30)
    try:
        time.sleep(0.5)
        src = source_factory([url(redis_server)], duty=0.2)
        before = int(r.info("commandstats")["cmdstat_get"]["calls"])
        src.start()
        tally = Tally()
        tally.pump(src, lambda t: False, timeout=5.0)
        after = int(r.info("commandstats")["cmdstat_get"]["calls"])
        tally.add(src.next_batch(0.3))
    finally:
        load.kill()
        load.wait()
    true = after - before
    est = tally.total.get((0, b"paced"), 0)
    assert true > 2000
    assert 0.75 * true <= est <= 1.25 * true, (est, true)


def test_reconnects_after_redis_restart(
    redis_server: RedisServer, source_factory: Any, metrics: Metrics
) -> None:
    src = source_factory([url(redis_server)], backoff_initial=0.05, backoff_max=0.5)
    src.start()
    r = redis.Redis(port=redis_server.port)
    r.get("before")
    tally = Tally()
    assert tally.pump(src, lambda t: (0, b"before") in t.total)
    redis_server.restart(down_for=0.5)
    deadline = time.monotonic() + 20
    while (0, b"after") not in tally.total and time.monotonic() < deadline:
        with contextlib.suppress(redis.ConnectionError):
            redis.Redis(port=redis_server.port).get("after")
        tally.add(src.next_batch(0.2))
    assert (0, b"after") in tally.total
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="restart") >= 1
    assert metric(metrics, "hotkeyd_source_errors_total", source="monitor", kind="connection") >= 1


def test_backlog_disconnects_instead_of_buffering(
    redis_server: RedisServer, source_factory: Any, metrics: Metrics
) -> None:
    # Nobody drains the source: once more than max_pending_bytes arrived it must drop
    # the connection (counted), then reconnect and keep producing.
    src = source_factory(
        [url(redis_server)], max_pending_bytes=64 << 10, read_size=16 << 10, backoff_initial=0.05
    )
    src.start()
    bg = benchmark(redis_server, "-t", "set", "-n", "30000", "-c", "2")
    bg.wait(60)
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="backlog") >= 1
    assert metric(metrics, "hotkeyd_source_errors_total", source="monitor", kind="backlog") >= 1
    r = redis.Redis(port=redis_server.port)
    tally = Tally()

    def seen(t: Tally) -> bool:
        r.get("still-alive")
        return (0, b"still-alive") in t.total

    assert tally.pump(src, seen)


def test_output_buffer_poll_disconnects(
    redis_server: RedisServer, source_factory: Any, metrics: Metrics
) -> None:
    # max_backlog_bytes=1: any output the server still holds for the tap is "too much".
    src = source_factory(
        [url(redis_server)], max_backlog_bytes=1, poll_interval=0.01, backoff_initial=0.05
    )
    src.start()
    bg = benchmark(redis_server, "-t", "set", "-n", "3000000", "-P", "16", "-c", "4", "-d", "200")
    try:
        tally = Tally()
        tally.pump(
            src,
            lambda t: metric(metrics, "hotkeyd_monitor_disconnects_total", reason="backlog") >= 1,
            timeout=30,
        )
    finally:
        bg.kill()
        bg.wait()
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="backlog") >= 1


# ------------------------------------------------------------------ ACL


MINIMAL_ACL = ["+monitor", "+command|info", "+client|id", "+client|list", "+cluster|nodes"]


def acl_user(rs: RedisServer, name: str, *rules: str) -> None:
    redis.Redis(port=rs.port).execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)


@pytest.mark.parametrize("duty", [1.0, 0.5])
def test_minimal_acl_user_can_tap(
    any_redis_server: RedisServer,
    source_factory: Any,
    caplog: pytest.LogCaptureFixture,
    duty: float,
) -> None:
    redis_server = any_redis_server  # every flavor: its MONITOR format and ACLs
    # duty < 1 exercises RESET (which logs the connection out) and the re-AUTH after it
    acl_user(redis_server, "tap", *MINIMAL_ACL)
    src = source_factory([url(redis_server, "tap:pw@")], duty=duty)
    src.start()
    assert src.taps[0].client_id is not None  # output-buffer polling works too
    r = redis.Redis(port=redis_server.port)
    tally = Tally()

    def seen(t: Tally) -> bool:
        r.set("via-acl", 1)
        return t.writes.get((0, b"via-acl"), 0) >= 3 / duty  # survived several cycles

    assert tally.pump(src, seen, timeout=15)
    assert "cannot poll" not in caplog.text
    assert "CLUSTER NODES" not in caplog.text
    assert "failed" not in caplog.text


@pytest.mark.parametrize("missing", MINIMAL_ACL[:2])
def test_missing_permission_is_a_clear_error(
    redis_server: RedisServer, source_factory: Any, missing: str
) -> None:
    acl_user(redis_server, "weak", *[p for p in MINIMAL_ACL if p != missing])
    src = source_factory([url(redis_server, "weak:pw@")])
    with pytest.raises(MonitorPermissionError) as ei:
        src.start()
    msg = str(ei.value)
    assert "'weak'" in msg
    assert missing.lstrip("+").split("|")[0].upper() in msg
    assert f"ACL SETUSER weak {missing}" in msg


def test_wrong_password_is_fatal_at_start(redis_server: RedisServer, source_factory: Any) -> None:
    acl_user(redis_server, "tap", *MINIMAL_ACL)
    with pytest.raises(MonitorError, match="authentication"):
        source_factory([url(redis_server, "tap:nope@")]).start()
    # the server now requires a password the URL does not give
    redis.Redis(port=redis_server.port).config_set("requirepass", "sesame")
    with pytest.raises(MonitorError, match=r"NOAUTH"):
        source_factory([url(redis_server)]).start()


# ------------------------------------------------------------------ cluster


def test_cluster_seed_taps_the_primary(source_factory: Any, shared_redis: RedisServer) -> None:
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    with RedisServer(extra_args=[*args, "--cluster-port", str(free_port())]) as rs:
        r = redis.Redis(port=rs.port)
        r.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        deadline = time.monotonic() + 10
        while r.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        src = source_factory([f"redis-monitor://localhost:{rs.port}"])
        src.start()
        assert [t.target.redis.port for t in src.taps] == [rs.port]
        r.set("clustered", 1)
        tally = Tally()
        assert tally.pump(src, lambda t: (0, b"clustered") in t.writes)
        with pytest.raises(MonitorError, match="not a cluster"):
            source_factory([url(shared_redis) + "?cluster=yes"]).start()


def test_three_node_cluster_all_primaries_tapped(source_factory: Any) -> None:
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    nodes = [RedisServer(extra_args=[*args, "--cluster-port", str(free_port())]) for _ in range(3)]
    try:
        for n in nodes:
            n.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{n.port}" for n in nodes],
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        for n in nodes:
            r = redis.Redis(port=n.port)
            while b"cluster_state:ok" not in r.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "cluster did not converge"
                time.sleep(0.1)
        src = source_factory([f"redis-monitor://127.0.0.1:{nodes[0].port}"])
        src.start()
        assert sorted(t.target.redis.port for t in src.taps) == sorted(n.port for n in nodes)
        rc: Any = redis.RedisCluster(host="127.0.0.1", port=nodes[1].port)
        keys = [f"ck:{i}".encode() for i in range(300)]
        for k in keys:
            rc.set(k, 1)
        tally = Tally()
        assert tally.pump(src, lambda t: all((0, k) in t.writes for k in keys), timeout=15)
        assert len(tally.servers) == 3  # the keys really came from three taps
        rc.close()
    finally:
        for n in nodes:
            n.stop()


# ------------------------------------------------------------------ TLS


def make_certs(d: Any) -> tuple[str, str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1 (openssl CLI)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
    run("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=hotkeyd-test-ca")  # fmt: skip
    run("openssl", "req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.crt", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    return str(d / "ca.crt"), str(d / "srv.crt"), str(d / "srv.key")


def test_tls_tap(tmp_path: Any, source_factory: Any) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    ca, crt, key = make_certs(tmp_path)
    tls_port = free_port()
    tls_args = ["--tls-port", str(tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
                "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]  # fmt: skip
    with RedisServer(extra_args=tls_args) as rs:
        src = source_factory([f"redis-monitor+tls://127.0.0.1:{tls_port}?ssl_ca_certs={ca}"])
        src.start()
        redis.Redis(port=rs.port).set("over-tls", 1)
        tally = Tally()
        assert tally.pump(src, lambda t: (0, b"over-tls") in t.writes)
        # a client that does not trust the server's CA is refused
        with pytest.raises(MonitorError, match="TLS handshake"):
            source_factory([f"redis-monitor+tls://127.0.0.1:{tls_port}"], connect_timeout=2).start()


def test_select_on_one_connection_tracks_db(redis_server: RedisServer, source_factory: Any) -> None:
    src = source_factory([url(redis_server)])
    src.start()
    r = redis.Redis(port=redis_server.port, single_connection_client=True)
    r.execute_command("SELECT", 3)
    r.set("samename", 1)
    r.execute_command("SELECT", 0)
    r.get("samename")
    r.close()
    tally = Tally()
    assert tally.pump(src, lambda t: (0, b"samename") in t.total)
    assert tally.writes == {(3, b"samename"): 1}
    assert tally.total == {(3, b"samename"): 1, (0, b"samename"): 1}


class SkewedClock:
    """The real clock, with wall time pushed forward on demand (lines look late)."""

    def __init__(self) -> None:
        self.skew = 0.0

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time() + self.skew


def test_lag_beyond_max_lag_disconnects(
    redis_server: RedisServer, source_factory: Any, metrics: Metrics
) -> None:
    clock = SkewedClock()
    src = source_factory([url(redis_server)], clock=clock, max_lag=5.0, backoff_initial=0.05)
    src.start()
    r = redis.Redis(port=redis_server.port)
    tally = Tally()

    def seen(key: bytes) -> Any:
        def check(t: Tally) -> bool:
            r.get(key)
            return (0, key) in t.total

        return check

    assert tally.pump(src, seen(b"on-time"))
    assert metric(metrics, "hotkeyd_monitor_disconnects_total", reason="backlog") == 0
    clock.skew = 60.0  # from now on every line looks 60 s late
    assert tally.pump(
        src,
        lambda t: (
            bool(r.get("x") or True)
            and metric(metrics, "hotkeyd_monitor_disconnects_total", reason="backlog") >= 1
        ),
    )
    # after reconnecting, the new connection's baseline absorbs the offset
    assert tally.pump(src, seen(b"after-lag"))


def cluster_node() -> RedisServer:
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    return RedisServer(extra_args=[*args, "--cluster-port", str(free_port())])


def test_cluster_topology_refresh_adds_and_removes_primaries(source_factory: Any) -> None:
    with cluster_node() as a, cluster_node() as b:
        ra, rb = redis.Redis(port=a.port), redis.Redis(port=b.port)
        ra.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        src = source_factory([f"redis-monitor://127.0.0.1:{a.port}"], cluster_refresh=0.2)
        src.start()
        assert [t.target.redis.port for t in src.taps] == [a.port]
        bus = int(rb.config_get("cluster-port")["cluster-port"])  # type: ignore[arg-type]
        ra.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port, bus)
        tally = Tally()
        assert tally.pump(src, lambda t: len(src.taps) == 2, timeout=20)
        new = next(t for t in src.taps if t.target.redis.port == b.port)
        assert tally.pump(src, lambda t: bool(rb.ping()) and new.lines > 0)
        b_id = rb.execute_command("CLUSTER", "MYID").decode()
        ra.execute_command("CLUSTER", "FORGET", b_id)
        assert tally.pump(src, lambda t: len(src.taps) == 1, timeout=20)
        assert src.taps[0].target.redis.port == a.port
        assert new.stop_event.is_set()


def test_several_urls_tap_several_servers(
    redis_server: RedisServer, shared_redis: RedisServer, source_factory: Any, unique: str
) -> None:
    src = source_factory([url(redis_server), url(shared_redis)])
    src.start()
    assert len(src.taps) == 2
    key_a, key_b = f"on-a-{unique}".encode(), f"on-b-{unique}".encode()
    redis.Redis(port=redis_server.port).set(key_a, 1)
    redis.Redis(port=shared_redis.port).set(key_b, 1)
    tally = Tally()
    assert tally.pump(src, lambda t: (0, key_a) in t.writes and (0, key_b) in t.writes)
    assert {url(redis_server), url(shared_redis)} <= tally.servers


def test_strictly_minimal_acl_taps_with_a_warning(
    any_redis_server: RedisServer, source_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    redis_server = any_redis_server  # every flavor: its MONITOR format and ACLs
    acl_user(redis_server, "bare", "+monitor", "+command|info")
    src = source_factory([url(redis_server, "bare:pw@")])
    src.start()
    assert src.taps[0].client_id is None  # no output-buffer polling possible
    assert "cannot poll" in caplog.text and "CLUSTER NODES" in caplog.text
    r = redis.Redis(port=redis_server.port)
    tally = Tally()
    assert tally.pump(src, lambda t: bool(r.set("bare-key", 1)) and (0, b"bare-key") in t.writes)
