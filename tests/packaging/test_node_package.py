"""The npm tarball from ``dist/`` in a fresh project outside the repository.

``npm install <tarball> ioredis`` (what ``npm install @hotkeyd/client ioredis`` does once it
is published) must give a package that loads through its exports map
(``import("@hotkeyd/client")``), without kafkajs (an optional peer, loaded only by
``Reporter.start()``), and reads a hot key through a real daemon with the app's own
ioredis: the current major (5) and the previous one (4), each a peer the app chose.

Cost: ~10 s per ioredis major (npm from its cache, the daemon's detection).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .fresh import DIST, KEY, VERSION, hot_key_deployment, make_dist, need, result, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

APP = """
import Redis from "ioredis"; // the default export: ioredis 4 and 5 alike

const { HotCache, Namespace, Reporter } = await import("@hotkeyd/client");
const [url, namespace, key] = process.argv.slice(2);
const redis = new Redis(url);
const cache = await new HotCache(redis, { namespace: new Namespace(namespace) }).start();
const deadline = Date.now() + 60_000;
let value = null;
const hot = () => cache.hotSet.get(Buffer.from(key)) !== undefined;
while (Date.now() < deadline) {
  value = await cache.get(key);
  if (hot() && cache.stats.hits > 100) break;
}
let reporter = "loaded";
try {
  await new Reporter({ brokers: ["127.0.0.1:1"], topic: "t" }).start();
} catch (err) {
  reporter = String(err.message);
}
console.log(JSON.stringify({ hot: hot(), value, local: cache.stats.hits, reporter }));
await cache.close();
redis.disconnect();
"""


@pytest.mark.parametrize("ioredis", ["5", "4"])
def test_tarball_installs_into_a_fresh_project_and_reads_a_hot_key(
    tmp_path: Path, ioredis: str
) -> None:
    npm = need("npm")
    make_dist("node")
    tarball = DIST / f"hotkeyd-client-{VERSION}.tgz"
    assert tarball.is_file(), sorted(p.name for p in DIST.iterdir())
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps({"name": "app", "private": True, "type": "module"})
    )
    quiet = ["--no-audit", "--no-fund", "--loglevel=error"]
    # README: npm install @hotkeyd/client ioredis (the tarball stands for the registry)
    run([npm, "install", *quiet, str(tarball), f"ioredis@{ioredis}"], app)
    installed = json.loads(run([npm, "ls", "--json", "--all"], app))["dependencies"]
    assert "kafkajs" not in installed, "kafkajs is an optional peer: not installed unasked"
    nested = app / "node_modules" / "@hotkeyd" / "client" / "node_modules" / "ioredis"
    assert not nested.exists(), "ioredis must be the app's (a peer), not a second copy"
    assert installed["ioredis"]["version"].startswith(f"{ioredis}."), installed["ioredis"]

    (app / "read.mjs").write_text(APP)
    with hot_key_deployment(tmp_path) as dep:
        out = run([need("node"), "read.mjs", dep.redis_url, dep.namespace, KEY], app, timeout=90)
    got = result(out)
    assert "npm install kafkajs" in got["reporter"], got
