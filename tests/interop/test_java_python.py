"""Cross-language end to end: a Java app and a Python app on one real daemon.

Wired as deployed: a real ``hotkeyd run`` taps a real redis-server with MONITOR; a Java app
(``clients/java``'s ``InteropApp``, through the Java ``HotCache``) and a Python app
(``pyapp.py``, through the Python ``HotCache``) each read one key at 2,000/s. Nothing is
fed to the daemon by hand: MONITOR shows it what reaches Redis, and both SDKs' demand
reports show it what their caches served. The test only watches: the events channel, the
server's ``INFO commandstats``, and the apps' JSON lines.

Checks: both apps promote the key; Redis serves <= 2 % of their reads of it once they
have; the key does not flap (one hot event, no cool while the load lasts); a write through
the Java HotCache is served by the Python app within 100 ms, and the reverse.
Cost: ~15 s of Maven (compiling the Java client, cached in ~/.m2) + ~25 s of load.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from hotkeyd.testing import RedisServer
from hotkeyd.wire import Namespace
from tests.client.helpers import wait_until
from tests.client.loop_harness import RULES, Daemon, EventWatcher, running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "clients" / "java"
PYAPP = str(Path(__file__).with_name("pyapp.py"))
KEY = "interop:item"
RATE = 2000
SECONDS = 40.0


@pytest.fixture(scope="module")
def java_classpath() -> str:
    """Compile the Java client and its test classes once; return the classpath."""
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        if os.environ.get("CI"):
            pytest.fail("Java 17 and Maven are required in CI (make java-deps)")
        pytest.skip("no Java/Maven")
    cp_file = JAVA / "target" / "interop-cp.txt"
    subprocess.run(
        [mvn, "-q", "-B", "-Dstyle.color=never", "test-compile", "dependency:build-classpath",
         f"-Dmdep.outputFile={cp_file}", "-Dmdep.includeScope=test"],
        cwd=JAVA, check=True, timeout=600,
    )  # fmt: skip
    deps = cp_file.read_text().strip()
    return os.pathsep.join(
        [str(JAVA / "target" / "test-classes"), str(JAVA / "target" / "classes"), deps]
    )


class AppProc:
    """One app process speaking JSON lines (events in a queue, commands on stdin)."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.events: list[dict[str, Any]] = []
        self.fresh: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events.append(ev)
            self.fresh.put(ev)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["ev"] == kind]

    def reads(self) -> int:
        p = self.of("progress")
        return int(p[-1]["reads"]) if p else 0

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_event(self, kind: str, value: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.of(kind):
                if e["v"] == value:
                    return e
            time.sleep(0.01)
        raise AssertionError(f"{self.name}: no {kind} event for {value!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._thread.join(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def apps_stop() -> Iterator[list[AppProc]]:
    procs: list[AppProc] = []
    yield procs
    for p in procs:
        p.stop()


def get_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def test_java_and_python_apps_share_one_daemon(
    redis_server: RedisServer,
    tmp_path: Path,
    java_classpath: str,
    apps_stop: list[AppProc],
    request: pytest.FixtureRequest,
) -> None:
    ns = Namespace(f"interop-{os.getpid()}-{time.monotonic_ns()}")
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    r = redis.Redis.from_url(redis_server.url)
    r.set(KEY, "v0")
    watcher = EventWatcher(redis_server.url, ns)
    request.addfinalizer(watcher.close)  # before the server stops, even on failure
    daemon = Daemon(
        f"redis-monitor://127.0.0.1:{redis_server.port}", redis_server.url, ns, rules, "d-interop"
    )
    started = time.time()
    with running(daemon):
        assert wait_until(daemon.healthy, timeout=20), "daemon not up"
        args = [str(redis_server.port), ns.prefix, KEY, str(RATE), str(SECONDS)]
        java = AppProc("java", ["java", "-cp", java_classpath, "io.hotkeyd.InteropApp", *args])
        py = AppProc("python", [sys.executable, PYAPP, *args])
        apps_stop += [java, py]
        for app in (java, py):
            assert wait_until(lambda a=app: a.of("ready"), timeout=30), f"{app.name} not ready"  # type: ignore[misc]

        # 1. both promote the key
        for app in (java, py):
            assert wait_until(lambda a=app: a.of("hot"), timeout=20), f"{app.name}: never hot"  # type: ignore[misc]
        hot_at = watcher.wait_hot(KEY.encode(), timeout=1)

        # 2. Redis serves <= 2 % of their reads once they have it
        time.sleep(0.5)  # both load their copies
        g1, a1 = get_calls(r), java.reads() + py.reads()
        time.sleep(8.0)
        g2, a2 = get_calls(r), java.reads() + py.reads()
        share = (g2 - g1) / max(1, a2 - a1)
        rates = [(a2 - a1) / 8.0]

        # 3. a write through one language's HotCache is served by the other within 100 ms
        java.send("set from-java-1")
        seen_py = py.wait_event("value", "from-java-1", timeout=5)
        wrote_java = java.wait_event("wrote", "from-java-1", timeout=5)
        py.send("set from-python-1")
        seen_java = java.wait_event("value", "from-python-1", timeout=5)
        wrote_py = py.wait_event("wrote", "from-python-1", timeout=5)
        java_to_py = seen_py["t"] - wrote_java["t"]
        py_to_java = seen_java["t"] - wrote_py["t"]
        time.sleep(2.0)  # the load goes on: still no flapping after the writes
        end = time.time()
        cools_during = [t for t, k in watcher.seen.cool if k == KEY.encode() and t < end]
        hots = watcher.seen.of("hot", KEY.encode())
        demand = daemon.metric("hotkeyd_demand_local_accesses_total")
    r.close()
    print(
        f"interop: hot {hot_at - started:.2f} s after the daemon started; Redis served {share:.3%} of {a2 - a1} reads "
        f"({rates[0]:.0f} reads/s over both apps); Java->Python {java_to_py} ms, "
        f"Python->Java {py_to_java} ms; daemon counted {demand:.0f} locally served reads"
    )
    assert a2 - a1 >= 2 * RATE * 8.0 * 0.8, f"apps read too slowly: {a2 - a1} in 8 s"
    assert share <= 0.02, f"Redis served {share:.2%} of the apps' reads"
    assert len(hots) == 1, f"{len(hots)} hot events: flapping"
    assert cools_during == [], "the key cooled while the load lasted"
    assert not java.of("cool") and not py.of("cool"), "an app saw the key cool"
    assert java_to_py <= 100, f"Java write seen by Python after {java_to_py} ms"
    assert py_to_java <= 100, f"Python write seen by Java after {py_to_java} ms"
    assert demand > 0, "the daemon received no demand reports"
