"""The app-side Python install, from ``dist/``, in a fresh venv outside the repository.

``pip install hotkeyd`` (here: the wheel ``make dist`` wrote) must bring only what the
client imports: redis and mmh3, not the daemon's Kafka, Prometheus and CLI stack. The
client must then import and run with nothing else: the program reads a key through
``HotCache`` until the repository's daemon declares it hot and the read is local. The
console script must say in one line which extra it lacks.

Cost: ~15 s (venv, pip from its cache, the daemon's detection).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from .fresh import DIST, KEY, VERSION, hot_key_deployment, make_dist, result, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

APP = """
import json, sys, time

from hotkeyd.client import HotCache, Namespace

url, namespace, key = sys.argv[1:4]
cache = HotCache.from_url(url, namespace=Namespace(namespace), decode_responses=True)
deadline = time.monotonic() + 60
value = None
while time.monotonic() < deadline:
    value = cache.get(key)
    if key.encode() in cache.hotset and cache.stats.hits > 100:
        break
# The idempotency guard is app-side too: its scripts run with the base install alone.
from hotkeyd.idempotency import IdempotencyGuard, Outcome

import redis

guard = IdempotencyGuard(redis.Redis.from_url(url), namespace=Namespace(namespace))
began = guard.begin("order-1", b"body")
guard.complete(began.lease, b"ok")
assert guard.begin("order-1", b"body").outcome is Outcome.DONE
print(json.dumps({"hot": key.encode() in cache.hotset, "value": value, "local": cache.stats.hits}))
cache.close()
"""

DAEMON_ONLY = ("kafka-python", "prometheus_client", "prometheus-client", "click", "crc32c")


def _fresh_venv(tmp_path: Path) -> Path:
    (wheel,) = DIST.glob(f"hotkeyd-{VERSION}-*.whl")
    env_dir = tmp_path / "app" / ".venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    run([str(py), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env)  # README: app side
    return py


def test_app_side_wheel_reads_a_hot_key_without_the_daemon_stack(tmp_path: Path) -> None:
    make_dist("python")
    py = _fresh_venv(tmp_path)
    names = run([str(py), "-m", "pip", "list", "--format=freeze"], tmp_path).lower()
    installed = {line.split("==")[0] for line in names.splitlines()}
    assert {"hotkeyd", "redis", "mmh3"} <= installed, installed
    assert not installed & set(DAEMON_ONLY), installed & set(DAEMON_ONLY)

    app = tmp_path / "app" / "read.py"
    app.write_text(APP)
    with hot_key_deployment(tmp_path) as dep:
        out = run([str(py), str(app), dep.redis_url, dep.namespace, KEY], app.parent, timeout=90)
    result(out)

    # The console script without the daemon extra: one line naming it, no traceback.
    cli = subprocess.run(
        [str(py.parent / "hotkeyd"), "run"], capture_output=True, text=True, check=False
    )
    assert cli.returncode != 0
    assert cli.stderr.strip().count("\n") == 0 and "hotkeyd[daemon]" in cli.stderr, cli.stderr
    # Metrics are the `metrics` extra: asking for them says so.
    metrics = subprocess.run(
        [str(py), "-c", "from hotkeyd.client import ClientMetrics"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert metrics.returncode != 0 and "hotkeyd[metrics]" in metrics.stderr, metrics.stderr
    # The Kafka Reporter is the kafka extra: constructing one says so.
    kafka = subprocess.run(
        [str(py), "-c", "from hotkeyd.conn.kafka import kafka_python; kafka_python()"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert kafka.returncode != 0 and "hotkeyd[kafka]" in kafka.stderr, kafka.stderr
    assert sys.executable != str(py)
