"""The stale-read harness of issue 25: every language's app, every write path, faults.

Generation-stamped values: every write to a hot key stores ``g:<n>:...`` with a growing
``n`` per key, and the writer logs ``(key, n, t_start, t_end, kind)``. The read apps
(``apps/``: Python, Go, Java, Node, each through its SDK's HotCache) log every read
``(key, n read, t_start, t_end, served locally)``. All times are CLOCK_MONOTONIC, which
every process on a Linux host shares. A read is **stale** when a newer generation's write
had *returned* before the read began; its staleness is how long before the read that
write returned. Deletions (a key expired by its ``PX``, evicted under ``maxmemory``) are
writes too: they get the next generation and the apps read them as "absent".

One run (:func:`run`) starts a data Redis (one node, or a 3-primary cluster with a replica
each), ``hotkeyd run`` on it (MONITOR source, the watch on), one read app per language, and
writes 10/s to each hot key through a timeline of phases: each writer kind in turn on a
quiet system (``sdk``: a Python HotCache's ``set``; ``direct``: a plain redis-py client;
``cli``: ``redis-cli``, a client in C; ``lua``: ``EVAL redis.call('SET')``; ``expire``:
``SET PX 50``, the key expires between writes; ``evict``: single node only, the key is
evicted under ``maxmemory``), then faults during writes: the watch connection killed
(``CLIENT KILL``), a primary frozen (``DEBUG SLEEP 2``), a ``CLUSTER FAILOVER`` (cluster),
the daemon SIGKILLed and restarted (``strict_rate``: a second app per language in strict
mode on the same run). A flash key is read by every app only in the middle
of the run: it turns hot, then cools, while it is written.

:class:`Report` gives stale reads and the worst staleness per writer kind and language,
write visibility (how long after a write returned an app still served the old value,
p99/p99.9/max per kind, quiet phases only), and the share of reads served locally and
the Redis reads of hot keys beyond one re-read per app per write.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.cluster

from hotkeyd.client import HotCache
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisClusterServers, RedisServer
from tests.client.loop_harness import Daemon
from tests.interop.apps import _need, _run, command

APPS = Path(__file__).resolve().parent / "apps"
LANGS = ("python", "go", "java", "node")
WRITE_RATE = 10.0  # writes/s per hot key (issue 25)
TTL = 2.0  # s: the rule's ttl, the life of a local copy: the bound of available mode
STRICT_LEASE = 0.3  # s: the bound of strict mode (the watch heartbeat lease)
EXPIRE_PX = 50  # ms: the expire writer's PX (the key expires before the next write)
EVICT_PX = 1000  # ms: the evict writer's PX (volatile, so volatile-ttl may evict it)
RULES = f"""
[default]
threshold = 500
ttl = {TTL}
cooldown = 1.0
"""
QUIET_KINDS = ("sdk", "direct", "cli", "lua", "expire", "evict")
DIRECT_KINDS = ("direct", "cli", "lua")  # the "direct write" targets


def mono() -> int:
    return time.monotonic_ns()  # CLOCK_MONOTONIC, the clock of every app's log


# ---------------------------------------------------------------- the read apps


_readers: dict[str, list[str]] = {}


def reader_command(lang: str, tmp: Path) -> list[str]:
    """The command that starts ``lang``'s stale-read app (built once per session)."""
    if lang not in _readers:
        _readers[lang] = _build_reader(lang, tmp)
    return _readers[lang]


def _build_reader(lang: str, tmp: Path) -> list[str]:
    if lang == "python":
        return [sys.executable, str(APPS / "reader.py")]
    if lang == "go":
        exe = tmp / "stale-reader-go"
        if not exe.exists():
            _run([_need("go"), "build", "-o", str(exe), "."], APPS / "go")
        return [str(exe)]
    if lang == "node":
        command("node", tmp)  # builds the Node client (dist/)
        return [_need("node"), str(APPS / "node" / "reader.mjs")]
    if lang == "java":
        java_cmd = command("java", tmp)  # builds the Java client; [java, -cp, cp, main]
        classes = tmp / "stale-reader-java"
        if not (classes / "StaleReader.class").exists():
            _run([_need("javac"), "-d", str(classes), "-cp", java_cmd[2],
                  str(APPS / "java" / "StaleReader.java")], APPS)  # fmt: skip
        return [java_cmd[0], "-cp", os.pathsep.join([str(classes), java_cmd[2]]), "StaleReader"]
    raise ValueError(lang)


class Reader:
    """One read app process and its read log."""

    def __init__(self, lang: str, tmp: Path, args: list[str], name: str = "") -> None:
        self.lang = name or lang  # the report's name: "go", or "go/strict" for a second app
        self.log = tmp / f"reads-{self.lang.replace('/', '-')}.log"
        self.err = (tmp / f"reader-{self.lang.replace('/', '-')}.err").open("w")
        self.proc = subprocess.Popen(
            [*reader_command(lang, tmp), *args, "--log", str(self.log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
        )  # fmt: skip
        self.done: dict[str, Any] = {}

    def wait_ready(self, timeout: float) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the app's first line; it blocks only until then
        if '"ready"' not in line:
            self.proc.kill()
            raise AssertionError(f"{self.lang} reader did not start: {line!r} {self.stderr()}")

    def stderr(self) -> str:
        return Path(self.err.name).read_text()[-3000:]

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            out, _ = self.proc.communicate("stop\n", timeout=timeout)
        except (OSError, ValueError):
            out = ""
        for line in out.splitlines():
            if '"done"' in line:
                self.done = json.loads(line)
        assert self.done, f"{self.lang} reader ended without a done line: {self.stderr()}"
        for line in self.stderr().splitlines():
            if line.startswith("still running"):  # the Node reader's exit watchdog
                print(f"  {self.lang} reader did not exit by itself after close(): {line}")
        return self.done

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.err.close()


# ---------------------------------------------------------------- the writers


@dataclass
class Write:
    key: int  # index into the run's keys
    gen: int
    t0: int
    t1: int
    kind: str
    phase: str
    deletion: bool = False  # an expiry or an eviction: the apps read "absent"


class Writers:
    """One thread per key writes ``g:<n>`` 10 times a second, as the timeline's phase says."""

    def __init__(self, topo: Topology, keys: list[str], ns: Namespace) -> None:
        self.topo = topo
        self.keys = keys
        self.writes: list[Write] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.phase = "warm"
        self.kind = "direct"
        self.sdk_client = topo.client()
        self.sdk = HotCache(self.sdk_client, namespace=ns, report_demand=False).start()
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"writer-{i}", daemon=True)
            for i in range(len(keys))
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def set_phase(self, phase: str, kind: str) -> None:
        self.phase, self.kind = phase, kind

    def _log(self, i: int, gen: int, t0: int, t1: int, kind: str, deletion: bool = False) -> None:
        with self._lock:
            self.writes.append(Write(i, gen, t0, t1, kind, self.phase, deletion))

    def _loop(self, i: int) -> None:
        key = self.keys[i]
        plain = self.topo.client()
        cli: subprocess.Popen[str] | None = None
        gen = 0
        volatile = (0, 0)  # (t0, t1) of an evict-kind write whose key was not evicted
        nxt = time.monotonic()
        while not self._stop.is_set():
            kind = self.kind if i < len(self.keys) - 1 else "direct"  # the flash key: direct
            if kind == "evict" and (i > 0 or not self.topo.single):
                kind = "direct"  # one volatile key at a time: volatile-ttl evicts that one
            if volatile[0] and mono() >= volatile[0] + EVICT_PX * 1_000_000:
                gen += 1  # a stalled writer: the key's PX ran out before this write
                px = EVICT_PX * 1_000_000
                self._log(i, gen, volatile[0] + px, volatile[1] + px, "expire", deletion=True)
            volatile = (0, 0)
            gen += 1
            value = f"g:{gen}:{kind}"
            try:
                t0 = mono()
                if kind == "sdk":
                    self.sdk.set(key, value)
                elif kind == "direct":
                    plain.set(key, value)
                elif kind == "lua":
                    plain.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, key, value)
                elif kind == "cli":
                    if cli is None:
                        cli = self.topo.cli(key)
                    assert cli.stdin is not None and cli.stdout is not None
                    cli.stdin.write(f"SET {key} {value}\n")
                    cli.stdin.flush()
                    reply = cli.stdout.readline()
                    if "OK" not in reply:
                        raise redis.RedisError(f"redis-cli: {reply!r}")
                elif kind == "expire":
                    plain.set(key, value, px=EXPIRE_PX)
                elif kind == "evict":
                    plain.set(key, value, px=EVICT_PX)  # volatile: the key volatile-ttl evicts
                t1 = mono()
                self._log(i, gen, t0, t1, kind)
                if kind == "expire":  # the expiry is the next generation: a deletion
                    gen += 1
                    px = EXPIRE_PX * 1_000_000
                    self._log(i, gen, t0 + px, t1 + px, "expire", deletion=True)
                elif kind == "evict":
                    time.sleep(0.03)
                    if self.topo.evict(key):
                        gen += 1
                        e0, e1 = self.topo.last_evict
                        self._log(i, gen, e0, e1, "evict", deletion=True)
                    else:  # often: Redis evicted another volatile key (the daemon's snapshot)
                        volatile = (t0, t1)
            except (redis.RedisError, OSError, AssertionError) as exc:
                with self._lock:
                    self.errors.append(f"{kind} {key}: {exc}")
                # the write may or may not have happened: later generations still order it
            nxt += 1.0 / WRITE_RATE
            d = nxt - time.monotonic()
            if d > 0:
                self._stop.wait(d)
            elif d < -1.0:
                nxt = time.monotonic()
        if cli is not None:
            cli.kill()
            cli.communicate(timeout=5)  # reaps it and closes its pipes
        plain.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        self.sdk.close()
        self.sdk_client.close()


# ---------------------------------------------------------------- topologies


class Topology:
    """The data Redis of a run: one node, or a 3-primary cluster with one replica each."""

    single: bool

    def __init__(self, kind: str) -> None:
        self.single = kind == "single"
        self.last_evict = (0, 0)
        self._evict_lock = threading.Lock()
        self.server: RedisServer | None = None
        self.cluster: RedisClusterServers | None = None
        if self.single:
            self.server = RedisServer(extra_args=["--enable-debug-command", "local",
                                                  "--maxmemory-policy", "volatile-ttl"])  # fmt: skip
        else:
            # node timeout 5 s: DEBUG SLEEP 2 freezes a primary without a failover
            self.cluster = RedisClusterServers(primaries=3, replicas=1, node_timeout=5000)
            for n in self.cluster.nodes:
                n.extra_args += ["--enable-debug-command", "local"]

    def __enter__(self) -> Topology:
        (self.server or self.cluster).start()  # type: ignore[union-attr]
        return self

    def __exit__(self, *exc: object) -> None:
        (self.server or self.cluster).stop()  # type: ignore[union-attr]

    @property
    def url(self) -> str:
        return self.server.url if self.server else self.cluster.url  # type: ignore[union-attr]

    @property
    def monitor(self) -> str:
        port = self.server.port if self.server else self.cluster.ports[0]  # type: ignore[union-attr]
        return f"redis-monitor://127.0.0.1:{port}"

    def app_args(self) -> list[str]:
        if self.server:
            return ["--url", self.server.url]
        assert self.cluster is not None
        return ["--cluster", ",".join(f"127.0.0.1:{p}" for p in self.cluster.ports)]

    def client(self) -> Any:
        if self.server:
            return redis.Redis.from_url(self.server.url)
        assert self.cluster is not None
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.cluster.ports[0])

    def primary_for(self, key: str) -> redis.Redis:
        if self.server:
            return redis.Redis.from_url(self.server.url)
        assert self.cluster is not None
        rc = redis.cluster.RedisCluster(host="127.0.0.1", port=self.cluster.ports[0])
        node = rc.get_node_from_key(key)
        rc.close()
        return redis.Redis(host="127.0.0.1", port=int(node.port))

    def primaries(self) -> list[redis.Redis]:
        if self.server:
            return [redis.Redis.from_url(self.server.url)]
        rc = redis.cluster.RedisCluster(host="127.0.0.1", port=self.cluster.ports[0])  # type: ignore[union-attr]
        out = [redis.Redis(host="127.0.0.1", port=int(n.port)) for n in rc.get_primaries()]
        rc.close()
        return out

    def cli(self, key: str) -> subprocess.Popen[str]:
        """``redis-cli`` reading commands from a pipe (a plain client in another language)."""
        r = self.primary_for(key)
        port = r.connection_pool.connection_kwargs["port"]
        r.close()
        args = [_need("redis-cli"), "-p", str(port)] + ([] if self.single else ["-c"])
        return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                bufsize=1)  # fmt: skip

    def evict(self, key: str) -> bool:
        """Evict ``key`` (the only short-TTL key) under ``maxmemory``; True if it was."""
        assert self.server is not None
        with self._evict_lock, redis.Redis.from_url(self.server.url) as r:
            used = int(r.info("memory")["used_memory"])
            # the clock starts before CONFIG SET: Redis evicts as soon as it runs (and before
            # any client's next command), not at the trigger's write. Taken after it, an app
            # could read "absent" before the deletion's logged start, and the read was then
            # charged to the previous logged deletion (the 2.71 s "stale" reads of the
            # 10^6-read run, Go/Java/Node: evictions of the key often fail, so that one
            # could be seconds old)
            t0 = mono()
            r.config_set("maxmemory", max(1, used - 64))
            with contextlib.suppress(redis.ResponseError):  # OOM: nothing volatile was left
                r.set("stale:evict:trigger", "x")  # a write: Redis evicts before running it
            t1 = mono()
            r.config_set("maxmemory", 0)
            gone = not r.exists(key)
            if gone:
                self.last_evict = (t0, t1)
            return gone

    def kill_watch(self) -> int:
        """CLIENT KILL every tracking connection (the daemon's watch) on every primary."""
        killed = 0
        for r in self.primaries():
            for c in r.client_list():
                if "t" in c.get("flags", ""):
                    killed += int(r.execute_command("CLIENT", "KILL", "ID", c["id"]))
            r.close()
        return killed

    def freeze(self, key: str, seconds: int = 2) -> threading.Thread:
        """``DEBUG SLEEP`` the primary of ``key`` (in a thread: the call blocks)."""

        def sleep() -> None:
            with self.primary_for(key) as r:
                r.execute_command("DEBUG", "SLEEP", seconds)

        t = threading.Thread(target=sleep, daemon=True)
        t.start()
        return t

    def failover(self, key: str) -> None:
        assert self.cluster is not None
        port = self.primary_for(key).connection_pool.connection_kwargs["port"]
        node = next(n for n in self.cluster.nodes if n.port == port)
        self.cluster.failover(node)


def pick_keys(topo: Topology, unique: str) -> list[str]:
    """Three hot keys (one per primary on a cluster) and the flash key, last."""
    if topo.single:
        keys = [f"stale:{unique}:hot:{i}" for i in range(3)]
    else:
        assert topo.cluster is not None
        keys = []
        for node in topo.cluster.nodes[: topo.cluster.primaries]:
            keys.append(
                next(
                    f"stale:{unique}:hot:{i}"
                    for i in range(10_000)
                    if topo.cluster.node_for(f"stale:{unique}:hot:{i}") is node
                    and f"stale:{unique}:hot:{i}" not in keys
                )
            )
    return [*keys, f"stale:{unique}:flash"]


# ---------------------------------------------------------------- the run


@dataclass
class Timeline:
    """Phases in seconds from the start of the writes."""

    seconds: float
    steps: list[tuple[float, str, str]] = field(default_factory=list)  # (at, phase, kind)
    flash: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def plan(cls, seconds: float, single: bool, kinds: tuple[str, ...] = QUIET_KINDS,
             faults: tuple[str, ...] | None = None) -> Timeline:  # fmt: skip
        warm = 6.0
        if faults is None:
            faults = ("kill-watch", "freeze", *(() if single else ("failover",)), "daemon-kill")
        fault_len = 5.0
        kinds = tuple(k for k in kinds if single or k != "evict")
        quiet = max(2.0, (seconds - warm - fault_len * len(faults)) / len(kinds))
        steps: list[tuple[float, str, str]] = [(0.0, "warm", "direct")]
        t = warm
        for k in kinds:
            steps.append((t, f"quiet:{k}", k))
            t += quiet
        for f in faults:
            steps.append((t, f"fault:{f}", "direct"))
            t += fault_len
        return cls(
            seconds=t, steps=steps, flash=(warm + 2.0, warm + 2.0 + 0.35 * quiet * len(kinds))
        )


@dataclass
class RunResult:
    topology: str
    langs: list[str]
    keys: list[str]
    writes: list[Write]
    reads: dict[str, Path]
    done: dict[str, dict[str, Any]]
    write_errors: list[str]
    timeline: Timeline
    t_start: int  # CLOCK_MONOTONIC ns of the timeline's 0
    fault_times: dict[str, int]
    trace: Path | None = None  # the daemon's HOTKEYD_WATCH_TRACE


def run(topology: str, tmp: Path, unique: str, seconds: float, rate: float,
        langs: tuple[str, ...] = LANGS, mode: str = "available",
        kinds: tuple[str, ...] = QUIET_KINDS, faults: tuple[str, ...] | None = None,
        sharded: bool = False, strict_rate: float = 0.0) -> RunResult:  # fmt: skip
    """One harness run (see the module docstring); the analysis is :class:`Report`'s.

    ``strict_rate`` > 0: a second app per language, in strict mode at that read rate, on
    the same topology and timeline (named ``<lang>/strict`` in the report)."""
    with ExitStack() as stack:
        topo = stack.enter_context(Topology(topology))
        ns = Namespace(f"stale-{unique}", sharded=sharded)  # sharded: SPUBLISH/SSUBSCRIBE
        keys = pick_keys(topo, unique)
        seed = topo.client()
        for k in keys:
            seed.set(k, "g:0:seed")
        seed.close()
        rules = tmp / "rules.toml"
        rules.write_text(RULES)
        trace = tmp / "watch-trace.log"  # the daemon's watch: when it read each push, published
        daemon = Daemon(topo.monitor, topo.url, ns, rules, f"stale-{unique}",
                        env={"HOTKEYD_WATCH_TRACE": str(trace)})  # fmt: skip
        stack.callback(_stop_daemon, daemon)
        _wait(daemon.healthy, 30, "daemon healthy")
        plan = Timeline.plan(seconds, topo.single, kinds, faults)
        # the flash window, in the shared clock, from a start a little ahead (app start-up)
        start_at = mono() + int(20e9)
        f0 = start_at + int(plan.flash[0] * 1e9)
        f1 = start_at + int(plan.flash[1] * 1e9)
        args = [*topo.app_args(), "--keys", ",".join(keys[:-1]),
                "--flash", f"{keys[-1]},{f0},{f1}", "--rate", str(rate), "--cold-keys", "50",
                "--namespace", ns.prefix, "--mode", mode,
                *(["--sharded"] if sharded else [])]  # fmt: skip
        readers: list[Reader] = []
        apps = [(lang, "", args) for lang in langs]
        if strict_rate > 0:
            sargs = [*args[: args.index("--rate")], "--rate", str(strict_rate), "--cold-keys",
                     "0", "--namespace", ns.prefix, "--mode", "strict"]  # fmt: skip
            sargs += ["--sharded"] if sharded else []
            apps += [(lang, f"{lang}/strict", sargs) for lang in langs]
        for lang, name, a in apps:  # one at a time: a failed start still stops the others
            r = Reader(lang, tmp, a, name)
            readers.append(r)
            stack.callback(r.kill)
        for r in readers:
            r.wait_ready(90)
        writers = Writers(topo, keys, ns)
        stack.callback(writers.stop)
        # wait until the apps' demand made the keys hot, then start the clock
        time.sleep(max(0.0, (start_at - mono()) / 1e9))
        t_start = mono()
        writers.start()
        fault_times: dict[str, int] = {}
        for at, phase, kind in plan.steps:
            _sleep_until(t_start + int(at * 1e9))
            writers.set_phase(phase, kind)
            if phase.startswith("fault:"):
                fault_times[phase] = mono()
                _fault(phase[6:], topo, daemon, keys)
        _sleep_until(t_start + int(plan.seconds * 1e9))
        writers.stop()
        done = {r.lang: r.stop() for r in readers}
        with (tmp / "writes.log").open("w") as f:
            for w in writers.writes:
                f.write(f"{w.key} {w.gen} {w.t0} {w.t1} {w.kind} {w.phase} {int(w.deletion)}\n")
        return RunResult(topology, list(langs), keys, writers.writes, {r.lang: r.log for r in readers},
                         done, writers.errors, plan, t_start, fault_times, trace)  # fmt: skip
    raise AssertionError("unreachable")


def _fault(name: str, topo: Topology, daemon: Daemon, keys: list[str]) -> None:
    if name == "kill-watch":
        assert topo.kill_watch() >= 1, "no watch connection to kill"
    elif name == "freeze":
        topo.freeze(keys[0], 2)
    elif name == "failover":
        threading.Thread(target=topo.failover, args=(keys[1],), daemon=True).start()
    elif name == "daemon-kill":
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(10)
        daemon.close()
        daemon.start(wait=False)


def _stop_daemon(d: Daemon) -> None:
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


def _sleep_until(t: int) -> None:
    d = (t - mono()) / 1e9
    if d > 0:
        time.sleep(d)


# ---------------------------------------------------------------- the analysis


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _read_log(path: Path) -> Iterator[tuple[int, int, int, int, int]]:
    with path.open() as f:
        for line in f:
            p = line.split()
            if len(p) == 5:
                yield int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4])


@dataclass
class LangStats:
    reads: int = 0
    stale: int = 0
    worst: float = 0.0  # s
    worst_by_kind: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    worst_by_phase: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    stale_by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    local: int = 0
    hot_reads: int = 0  # reads of the steady hot keys in the quiet sdk/direct phases
    hot_redis: int = 0  # of those, read from Redis
    hot_redis_excess: int = 0  # of those, beyond one re-read per write
    absent: int = 0
    errors: int = 0
    lags: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    lag_of: dict[tuple[int, int], float] = field(default_factory=dict)  # (key, gen) -> s


class Report:
    """Stale reads, visibility and Redis reads of one :class:`RunResult`."""

    def __init__(self, res: RunResult) -> None:
        self.res = res
        by_key: dict[int, dict[int, Write]] = defaultdict(dict)
        for w in res.writes:
            by_key[w.key][w.gen] = w
        self.by_key = by_key
        deletions = {k: sorted((w.t0, g) for g, w in ws.items() if w.deletion)
                     for k, ws in by_key.items()}  # fmt: skip
        self.langs: dict[str, LangStats] = {}
        steady = set(range(len(res.keys) - 1))
        # Redis reads of hot keys: measured in the phases whose values stay cacheable (an
        # absent key, between an expiry or eviction and the next write, is read from Redis)
        share_phases = tuple(f"quiet:{k}" for k in ("sdk", *DIRECT_KINDS))
        share_writes = sum(1 for w in res.writes if w.phase in share_phases and w.key in steady)
        for lang, path in res.reads.items():
            st = LangStats()
            last_ts: dict[int, dict[int, int]] = defaultdict(dict)  # key -> gen -> last t0
            for k, g, t0, _t1, local in _read_log(path):
                st.reads += 1
                st.local += local
                if g == -2:
                    st.errors += 1
                    continue
                if g == -1:  # absent: the latest deletion that could have been seen
                    st.absent += 1
                    g = _absent_gen(deletions.get(k, []), _t1)
                ws = by_key.get(k, {})
                nw = ws.get(g + 1)
                if nw is not None and nw.t1 < t0:
                    s = (t0 - nw.t1) / 1e9
                    st.stale += 1
                    st.stale_by_kind[nw.kind] += 1
                    st.worst = max(st.worst, s)
                    st.worst_by_kind[nw.kind] = max(st.worst_by_kind[nw.kind], s)
                    st.worst_by_phase[nw.phase] = max(st.worst_by_phase[nw.phase], s)
                d = last_ts[k]
                if t0 > d.get(g, 0):
                    d[g] = t0
                if k in steady and self._phase_at(t0) in share_phases:
                    st.hot_reads += 1
                    st.hot_redis += 1 - local
            # visibility: per write, the last read that still served an older generation
            for k, d in last_ts.items():
                ws = by_key.get(k, {})
                if not ws:
                    continue
                top = max(ws)
                prefix = [0] * (top + 2)
                m = 0
                for g in range(top + 2):
                    prefix[g] = m
                    m = max(m, d.get(g, 0))
                for g, w in ws.items():
                    if not w.phase.startswith("quiet:") or k not in steady:
                        continue
                    older_last = prefix[g] if g < len(prefix) else m
                    st.lags[w.kind].append(max(0.0, (older_last - w.t1) / 1e9))
                    st.lag_of[k, g] = st.lags[w.kind][-1]
            st.hot_redis_excess = st.hot_redis - share_writes
            self.langs[lang] = st
        self.stages = self._stages()

    def _stages(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(key, gen) of each quiet write -> when the daemon's watch read its tracking push
        and when its invalidation PUBLISH returned (CLOCK_MONOTONIC ns), from the trace."""
        res = self.res
        if res.trace is None or not res.trace.exists():
            return {}
        index = {k.encode().hex(): i for i, k in enumerate(res.keys)}
        per: dict[int, list[tuple[int, int]]] = defaultdict(list)
        with res.trace.open() as f:
            for line in f:
                p = line.split()
                if len(p) == 5 and p[1] == "write" and p[4] in index:
                    per[index[p[4]]].append((int(p[2]), int(p[3])))
        out: dict[tuple[int, int], tuple[int, int]] = {}
        for k, ws in self.by_key.items():
            pushes = sorted(per.get(k, []))
            starts = [t for t, _ in pushes]
            for g, w in ws.items():
                if not w.phase.startswith("quiet:"):
                    continue
                nxt = ws.get(g + 1)
                i = bisect.bisect_left(starts, w.t0)
                if i < len(pushes) and (nxt is None or pushes[i][0] < nxt.t0):
                    out[k, g] = pushes[i]
        return out

    def stage_text(self) -> list[str]:
        """Each quiet write's delay split into stages: the write returned -> the daemon's
        watch read the tracking push -> its PUBLISH returned -> the app's last read of the
        old copy (its read interval per key, ~2.4 ms, bounds that last stage's resolution).
        The tail (lag >= the kind's p99 in that language) is attributed to the stages."""
        if not self.stages:
            return []
        out = ["  stages (quiet writes; write returned -> daemon read the push -> daemon "
               "published -> app's last read of the old copy), ms p50/p99/max:"]  # fmt: skip

        def ms(xs: list[float]) -> str:
            qs = (_pct(xs, 0.5), _pct(xs, 0.99), max(xs, default=0.0))
            return "/".join(f"{q * 1000:.1f}" for q in qs)

        kinds = sorted({w.kind for ws in self.by_key.values() for w in ws.values()
                        if w.phase.startswith("quiet:") and w.kind in QUIET_KINDS})  # fmt: skip
        for kind in kinds:
            writes = [(k, g, w) for k, ws in self.by_key.items() for g, w in ws.items()
                      if w.phase == f"quiet:{kind}" and w.kind == kind
                      and k < len(self.res.keys) - 1]  # fmt: skip
            traced = [(k, g, w, self.stages[k, g]) for k, g, w in writes if (k, g) in self.stages]
            push = [max(0, p - w.t1) / 1e9 for _, _, w, (p, _) in traced]
            pub = [(q - p) / 1e9 for _, _, _, (p, q) in traced]
            out.append(f"    {kind:7} daemon read the push {ms(push)}, published +{ms(pub)} "
                       f"(traced {len(traced)}/{len(writes)} writes)")  # fmt: skip
            for lang, st in self.langs.items():
                rows = []
                for k, g, w, (p, q) in traced:
                    lag = st.lag_of.get((k, g))
                    if lag is None:
                        continue
                    a, b = max(0, p - w.t1) / 1e9, (q - p) / 1e9
                    rows.append((lag, a, b, max(0.0, lag - a - b)))
                if not rows:
                    continue
                cut = _pct([r[0] for r in rows], 0.99)
                tail = [r for r in rows if r[0] >= cut and r[0] > 0]
                tot = sum(r[1] + r[2] + r[3] for r in tail) or 1.0
                share = ", ".join(f"{name} {sum(r[i] for r in tail) / tot:.0%}"
                                  for i, name in ((1, "push"), (2, "publish"), (3, "app")))  # fmt: skip
                out.append(f"      {lang:13} app after publish {ms([r[3] for r in rows])} | tail "
                           f"(lag >= p99 {cut * 1000:.1f} ms, n={len(tail)}): {share}")  # fmt: skip
        return out

    def _phase_at(self, t: int) -> str:
        rel = (t - self.res.t_start) / 1e9
        if not 0 <= rel <= self.res.timeline.seconds:
            return "outside"
        phase = "warm"
        for at, ph, _ in self.res.timeline.steps:
            if rel >= at:
                phase = ph
        return phase

    def worst(self, strict: bool | None = None) -> float:
        """The worst staleness of every app (``strict``: of the strict apps, or the others)."""
        return max((s.worst for lang, s in self.langs.items()
                    if strict is None or strict == lang.endswith("/strict")), default=0.0)  # fmt: skip

    def worst_in(self, phases: tuple[str, ...], strict: bool) -> float:
        """The worst staleness caused by a write made during one of ``phases``."""
        return max((s.worst_by_phase.get(ph, 0.0) for lang, s in self.langs.items()
                    for ph in phases if strict == lang.endswith("/strict")), default=0.0)  # fmt: skip

    def lags(self, kinds: tuple[str, ...]) -> list[float]:
        return [x for s in self.langs.values() for k in kinds for x in s.lags.get(k, [])]

    def text(self) -> str:
        r = self.res
        out = [f"stale-read harness, {r.topology}: {len(r.writes)} writes "
               f"({WRITE_RATE:.0f}/s per key, {len(r.keys) - 1} hot keys + flash key), "
               f"{len(r.write_errors)} write errors (faults)"]  # fmt: skip
        for lang, s in self.langs.items():
            share = s.local / max(1, s.reads)
            excess = s.hot_redis_excess
            out.append(
                f"  {lang:13} reads {s.reads:>8}  stale {s.stale:>5}  worst {s.worst * 1000:8.1f} ms  "
                f"local {share:6.2%}  Redis reads of hot keys (quiet) {s.hot_redis}/{s.hot_reads}"
                f" = {s.hot_redis / max(1, s.hot_reads):.3%}, beyond 1 per write "
                f"{max(0, excess) / max(1, s.hot_reads):.3%}  absent {s.absent}"
            )
            for kind in sorted(set(s.worst_by_kind) | set(s.lags)):
                lags = s.lags.get(kind, [])
                out.append(
                    f"      {kind:7} stale {s.stale_by_kind.get(kind, 0):>5} worst "
                    f"{s.worst_by_kind.get(kind, 0.0) * 1000:8.1f} ms | visibility (quiet) "
                    f"n={len(lags):>4} p99 {_pct(lags, 0.99) * 1000:7.1f} ms p99.9 "
                    f"{_pct(lags, 0.999) * 1000:7.1f} ms max {max(lags, default=0) * 1000:7.1f} ms"
                )
            faults = {ph: w for ph, w in s.worst_by_phase.items() if ph.startswith("fault:")}
            if faults:
                out.append("      writes during faults, worst: " + ", ".join(
                    f"{ph[6:]} {w * 1000:.1f} ms" for ph, w in sorted(faults.items())))  # fmt: skip
        out += self.stage_text()
        for name, kinds in (("direct (direct/cli/lua)", DIRECT_KINDS), ("sdk", ("sdk",))):
            lags = self.lags(kinds)
            out.append(
                f"  all languages, {name}: n={len(lags)} p99 {_pct(lags, 0.99) * 1000:.1f} ms, "
                f"p99.9 {_pct(lags, 0.999) * 1000:.1f} ms, max {max(lags, default=0) * 1000:.1f} ms"
            )
        return "\n".join(out)


def _absent_gen(deletions: list[tuple[int, int]], t1: int) -> int:
    """The generation of the latest deletion that began before the read returned (0: the
    key was absent before the first write)."""
    g = 0
    for t0, gen in deletions:
        if t0 <= t1:
            g = gen
        else:
            break
    return g


def have(langs: tuple[str, ...] = LANGS) -> tuple[str, ...]:
    """The languages whose toolchain is installed (all of them in CI)."""
    tools = {"python": None, "go": "go", "node": "node", "java": "javac"}
    return tuple(lang for lang in langs if tools[lang] is None or shutil.which(tools[lang] or ""))
