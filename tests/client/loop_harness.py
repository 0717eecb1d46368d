"""The closed loop, wired as deployed: a real ``hotkeyd run``, real Redis, app processes.

Nothing here feeds the daemon by hand: the apps (``loadapp.py``) read through the SDK,
Redis (via MONITOR) or Kafka (via the reporter SDK) tells the daemon what reached the
server, and the SDK's demand reports tell it what the caches served. The harness only
watches: the events channel (hot/cool transitions), Redis' own counters
(``INFO stats`` keyspace_hits), the apps' progress files, and the daemon's HTTP
endpoints.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from hotkeyd.protocol.wire import Message, Namespace, WireError
from hotkeyd.testing import DaemonProcess

LOADAPP = str(Path(__file__).with_name("loadapp.py"))

# Detection settings of the scenarios: the bound on cooling after the demand ends is
# cooldown + window + one report interval (plus a tick and the notification).
THRESHOLD = 1000
COOLDOWN = 1.0
WINDOW = 1.0
REPORT_INTERVAL = 0.25
RULES = f"""
[default]
threshold = {THRESHOLD}
ttl = 2.0
cooldown = {COOLDOWN}
"""


@dataclass
class Transitions:
    """Hot/cool transitions of every key seen on the events channel, with wall times."""

    hot: list[tuple[float, bytes]] = field(default_factory=list)
    cool: list[tuple[float, bytes]] = field(default_factory=list)
    bad: int = 0

    def of(self, kind: str, key: bytes) -> list[float]:
        return [t for t, k in getattr(self, kind) if k == key]


class EventWatcher:
    """Follows the events channel in a thread and records transitions."""

    def __init__(self, url: str, ns: Namespace) -> None:
        self.r = redis.Redis.from_url(url)
        self.ps = self.r.pubsub(ignore_subscribe_messages=True)
        self.ps.subscribe(ns.channel)
        self.seen = Transitions()
        self._hot: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.ps.get_message(timeout=0.1)
            except (redis.ConnectionError, OSError):
                return  # the server went away (the test is over)
            if msg is None:
                continue
            now = time.time()
            try:
                m = Message.loads(msg["data"])
            except WireError:
                self.seen.bad += 1
                continue
            for h in m.hot:
                if h.key not in self._hot:
                    self._hot.add(h.key)
                    self.seen.hot.append((now, h.key))
            for c in m.cool:
                if c.key in self._hot:
                    self._hot.discard(c.key)
                    self.seen.cool.append((now, c.key))

    def wait_hot(self, key: bytes, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := self.seen.of("hot", key):
                return got[0]
            time.sleep(0.02)
        raise AssertionError(f"{key!r} never turned hot within {timeout} s")

    def wait_cool(self, key: bytes, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := self.seen.of("cool", key):
                return got[-1]
            time.sleep(0.02)
        raise AssertionError(f"{key!r} never cooled within {timeout} s")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.ps.close()
        self.r.close()


class Daemon(DaemonProcess):
    """``hotkeyd run`` on a source, as the loop scenarios deploy it (started at once)."""

    def __init__(
        self, source: str, redis_url: str, ns: Namespace, rules: Path, instance: str,
        env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            "-s", source, "--redis-url", redis_url, "--namespace", ns.prefix,
            "--rules", str(rules), "--instance", instance, "--window", str(WINDOW),
            *(["--sharded-pubsub"] if ns.sharded else []),
            stdin=False, capture=False, log_level="warning", env=env,
        )  # fmt: skip
        self.instance = instance
        self.start(wait=False)

    def stop(self, timeout: float = 15.0, force: bool = True) -> int:
        return super().stop(timeout, force)


class App:
    """One app process (``loadapp.py``) and its progress file."""

    def __init__(self, args: list[str], progress: Path) -> None:
        self.progress = progress
        self.proc = subprocess.Popen([sys.executable, LOADAPP, "--progress", str(progress), *args])

    def state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.progress.read_text())
        except (OSError, ValueError):
            return {"reads": 0, "done": False}
        return data

    def wait(self, timeout: float) -> dict[str, Any]:
        assert self.proc.wait(timeout) == 0, "the app process failed"
        st = self.state()
        assert st["done"], st
        return st

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def keyspace_hits(r: redis.Redis) -> int:
    return int(r.info("stats")["keyspace_hits"])


@dataclass
class LoopResult:
    transitions: Transitions
    hot_at: float
    load_end: float
    cool_at: float
    redis_share: float  # of the apps' reads of the key after detection, served by Redis
    app_reads: int
    app_rate: float  # reads/s the apps really made after detection
    topk_during_load: dict[str, Any]
    demand: list[dict[str, Any]]


@contextmanager
def running(*parts: Daemon | App | EventWatcher) -> Iterator[None]:
    """Stop (kill apps, terminate daemons, close watchers) whatever happens inside."""
    try:
        yield
    finally:
        for p in parts:
            if isinstance(p, App):
                p.kill()
            elif isinstance(p, EventWatcher):
                p.close()
            else:
                p.stop()


def run_loop(
    daemon: Daemon,
    watcher: EventWatcher,
    r: redis.Redis,
    apps: list[App],
    key: bytes,
    seconds: float,
) -> LoopResult:
    """Drive one scenario: detection, load served locally, then cooling after it ends."""
    hot_at = watcher.wait_hot(key, timeout=min(20.0, seconds / 2))
    time.sleep(0.5)  # the apps learn it (pub/sub) and load their copies
    h1 = keyspace_hits(r)
    time.sleep(0.3)  # progress files lag by <= 0.2 s: reads counted from here are fewer
    a1 = sum(a.state()["reads"] for a in apps)
    t1 = time.time()
    time.sleep(max(0.0, seconds / 2 - 1.0))
    topk = daemon.topk()
    finals = [a.wait(seconds + 60) for a in apps]
    h2 = keyspace_hits(r)
    a2 = sum(f["reads"] for f in finals)
    load_end = max(f["end"] for f in finals)
    cool_at = watcher.wait_cool(key, timeout=20.0)
    return LoopResult(
        transitions=watcher.seen,
        hot_at=hot_at,
        load_end=load_end,
        cool_at=cool_at,
        redis_share=(h2 - h1) / max(1, a2 - a1),
        app_reads=a2 - a1,
        app_rate=(a2 - a1) / max(1e-3, load_end - t1),
        topk_during_load=topk,
        demand=[f["demand"] for f in finals],
    )


def check_loop(res: LoopResult, key: bytes) -> None:
    """The acceptance criteria of issue 11 for one scenario."""
    hots = res.transitions.of("hot", key)
    cools = res.transitions.of("cool", key)
    print(
        f"loop: hot events {len(hots)}, cool events {len(cools)} "
        f"({len([t for t in cools if t < res.load_end])} during the load), "
        f"Redis served {res.redis_share:.4%} of {res.app_reads} reads after detection, "
        f"cooled {res.cool_at - res.load_end:.2f} s after the load ended; "
        f"apps read {res.app_rate:.0f}/s"
    )
    assert len(hots) == 1, f"expected exactly one hot event, got {len(hots)}: flapping"
    during = [t for t in cools if t < res.load_end]
    assert during == [], f"{len(during)} cool event(s) while the load lasted"
    assert res.app_reads > 20_000, res.app_reads
    assert res.redis_share <= 0.02, (
        f"Redis served {res.redis_share:.2%} of the apps' reads after detection"
    )
    bound = COOLDOWN + WINDOW + REPORT_INTERVAL
    took = res.cool_at - res.load_end
    assert took <= bound + 1.5, f"cooled {took:.2f} s after the load ended (bound {bound} s)"
    entry = next(e for e in res.topk_during_load["top"] if e["key"] == key.decode())
    assert entry["hot"] and entry["local"] / entry["rate"] > 0.9, entry
    # every read counted once: served locally (demand report) or by Redis, never both
    assert 0.6 * res.app_rate < entry["rate"] < 1.3 * res.app_rate, (entry, res.app_rate)
    assert all(d is not None and d["accesses"] > 0 and d["failed"] == 0 for d in res.demand)
