"""What every fresh-project test shares: the artifact from ``dist/``, and a hot key to read.

Each language's test builds its artifact with its own ``make dist-<lang>`` target (what
``make dist`` runs), installs it into a new project outside the repository the way the
README says, and runs a small program there that reads one key through the installed
``HotCache`` until the daemon has declared it hot and the read is served from process
memory. The daemon is the repository's own (``hotkeyd run`` from the test's venv), tapping
the Redis the app reads with MONITOR, so nothing feeds it by hand.

The program prints one JSON line at the end: ``{"hot": true, "value": "...", "local": N}``
(``local``: reads served from the local copy).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer
from tests.client.loop_harness import Daemon, running
from tests.interop.apps import _need as need

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
IN_CI = bool(os.environ.get("CI"))
VERSION = (ROOT / "VERSION").read_text().strip()
KEY = "ship:product:1"
VALUE = "fresh-from-redis"
# Low on purpose: a tight read loop in any language, on a loaded 2-core machine, turns the
# key hot within a second or two.
RULES = """
[default]
threshold = 200
ttl = 5.0
cooldown = 5.0
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def make_dist(target: str) -> None:
    """``make dist-<target>``: the artifact lands in ``dist/``, as ``make dist`` leaves it."""
    run([need("make"), "-s", f"dist-{target}"], ROOT)


@dataclass
class Deployment:
    redis_url: str
    namespace: str


@contextmanager
def hot_key_deployment(tmp: Path) -> Iterator[Deployment]:
    """A real Redis holding ``KEY``, and ``hotkeyd run`` tapping it and publishing to it."""
    rules = tmp / "rules.toml"
    rules.write_text(RULES)
    ns = Namespace(f"ship{os.getpid()}")
    with RedisServer() as server:
        redis.Redis.from_url(server.url).set(KEY, VALUE)
        tap = f"redis-monitor://127.0.0.1:{server.port}"
        daemon = Daemon(tap, server.url, ns, rules, "ship")
        with running(daemon):
            yield Deployment(server.url, ns.prefix)


def result(stdout: str) -> dict[str, Any]:
    """The program's last line, checked: the key was hot and served from local memory."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result line in:\n{stdout}"
    got: dict[str, Any] = json.loads(lines[-1])
    assert got.get("hot") is True, got
    assert got.get("value") == VALUE, got
    assert int(got.get("local", 0)) > 0, got
    return got
