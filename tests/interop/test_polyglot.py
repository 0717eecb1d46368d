"""Every client language against one real daemon: the loop holds, writes cross languages.

Wired as deployed: ``hotkeyd run`` taps Redis with MONITOR and publishes to it; one app
per language (Python, Go, Node and, where built, Java) reads one key through its own
HotCache at 2,000 reads/s with cold reads mixed in. Nobody feeds the daemon by hand:
MONITOR shows it what reaches Redis, each SDK's demand reports what its cache served.
The key must turn hot once and stay hot (no cool while the load lasts), Redis must serve
at most 2 % of the apps' reads of it (INFO keyspace_hits on the server), and once a write
through any language's HotCache returns, no other app may serve the old value for more
than 100 ms (measured in the apps' own clock: each one's last read of the old value).

Cost: about 20 s on a single node, 35 s on a 3-primary Redis Cluster (with replicas).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import redis
import redis.cluster

from hotkeyd.client import HotSet, Subscriber
from hotkeyd.protocol.wire import HotEntry, Namespace
from hotkeyd.testing import RedisClusterServers, RedisServer
from tests.client.loop_harness import RULES, Daemon, EventWatcher, Transitions, running

from .apps import ROOT, ReadApp

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LANGS = ["python", "go", "node"] + (
    ["java"]
    if (ROOT / "clients/java/src/main/java/io/hotkeyd/examples/ReadApp.java").exists()
    else []
)
RATE = 2000  # reads/s per app
WRITE_BOUND = 0.100  # s: a write through one app is read by every other app within this


def _hits(nodes: list[redis.Redis]) -> int:
    return sum(int(n.info("stats")["keyspace_hits"]) for n in nodes)


def _reads(apps: list[ReadApp]) -> int:
    return sum((a.last("stats") or {"reads": 0})["reads"] for a in apps)


class SdkWatcher:
    """Records hot/cool transitions through the Python SDK's own subscriber: it follows a
    sharded deployment too (SSUBSCRIBE on the channel's shard), which a bare SUBSCRIBE
    cannot. A TTL expiry counts as a cool: for the apps it is one."""

    def __init__(self, client: redis.cluster.RedisCluster, ns: Namespace) -> None:
        self.seen = Transitions()
        self.hotset = HotSet(on_hot=self._hot, on_cool=self._cool)
        self.sub = Subscriber(client, self.hotset, namespace=ns)
        self.sub.start()
        assert self.sub.wait_ready(10), "the watcher never subscribed"

    def _hot(self, e: HotEntry) -> None:
        self.seen.hot.append((time.monotonic(), e.key))

    def _cool(self, key: bytes) -> None:
        self.seen.cool.append((time.monotonic(), key))

    def wait_hot(self, key: bytes, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := self.seen.of("hot", key):
                return got[0]
            time.sleep(0.02)
        raise AssertionError(f"{key!r} never turned hot within {timeout} s")

    def close(self) -> None:
        self.sub.stop()


def _scenario(
    tmp_path: Path, ns: Namespace, key: str, monitor: str, publish: str,
    nodes: list[redis.Redis], app_args: list[str], langs: list[str] = LANGS,
    watcher: EventWatcher | SdkWatcher | None = None,
) -> None:  # fmt: skip
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    watcher = watcher or EventWatcher(publish, ns)
    daemon = Daemon(monitor, publish, ns, rules, f"poly-{ns.prefix}")
    apps: list[ReadApp] = []
    try:
        with running(daemon):
            deadline = time.monotonic() + 30
            while not daemon.healthy():
                assert time.monotonic() < deadline, "daemon not up"
                time.sleep(0.1)
            common = [*app_args, "--key", key, "--namespace", ns.prefix, "--rate", str(RATE),
                      "--cold-keys", "50", "--seconds", "120"]  # fmt: skip
            for lang in langs:  # one at a time: a failed start still stops the others
                apps.append(ReadApp(lang, tmp_path, *common))
            for a in apps:
                a.wait_event(lambda e: e.get("event") == "ready", 60, "ready line")
            watcher.wait_hot(key.encode(), timeout=30)
            for a in apps:  # every language promotes the key
                a.wait_event(lambda e: e.get("event") == "stats" and e.get("hot"), 10, "hot key")
            time.sleep(1.0)
            h1, r1 = _hits(nodes), _reads(apps)
            time.sleep(8.0)
            h2, r2 = _hits(nodes), _reads(apps)
            share = (h2 - h1) / max(1, r2 - r1)

            # writes cross languages: each app writes once; all others read it
            lags: list[float] = []
            pairs: list[tuple[str, str, float]] = []
            for i, writer in enumerate(apps):
                value = f"from-{writer.lang}-{i}"
                writer.send(f"set {value}")
                _, wrote = writer.wait_event(
                    lambda e, v=value: e.get("event") == "wrote" and e.get("value") == v,
                    10,
                    "write ack",
                )
                for other in apps:
                    if other is writer:
                        continue
                    _, seen = other.wait_event(
                        lambda e, v=value: e.get("event") == "value" and e.get("value") == v,
                        5,
                        f"the value written by {writer.lang}",
                    )
                    # Both times come from the apps (one host clock), so the test's own
                    # scheduling (pipes, threads) is not in them. The bound is on staleness:
                    # how long after the write returned the other app still SERVED the old
                    # value (its last read of it, prev_t). The first read of the new value
                    # (t) also counts the app being descheduled, serving nothing, on a loaded
                    # box; that is printed, and bounded by the 5 s wait above.
                    lags.append(max(0.0, (seen["t"] - wrote["t"]) / 1000.0))
                    stale = max(0.0, (seen["prev_t"] - wrote["t"]) / 1000.0)
                    pairs.append((writer.lang, other.lang, stale))
                time.sleep(0.2)
            finals = [a.stop() for a in apps]
            cools_during = [t for t, k in watcher.seen.cool if k == key.encode()]
            hots = [t for t, k in watcher.seen.hot if k == key.encode()]
    finally:
        for a in apps:
            a.kill()
        watcher.close()
    print(
        f"polyglot {langs}{' sharded' if ns.sharded else ''}: Redis served {share:.3%} of {r2 - r1} reads; "
        f"write->read lag median {statistics.median(lags) * 1000:.1f} ms, "
        f"max {max(lags) * 1000:.1f} ms over {len(lags)}; old value served up to "
        f"{max(s for _, _, s in pairs) * 1000:.1f} ms after a write; hot events {len(hots)}, "
        f"cool events during the load {len(cools_during)}"
    )
    assert all(f["reads"] > 0 and f.get("errors", 0) == 0 for f in finals), finals
    assert len(hots) == 1, f"{len(hots)} hot events: flapping"
    assert cools_during == [], "the key cooled while every app was still reading it"
    assert r2 - r1 >= 0.5 * RATE * len(apps) * 8, f"apps read too little ({r2 - r1})"
    assert share <= 0.02, f"Redis served {share:.2%} of the apps' reads after detection"
    slow = [(w, o, f"{s * 1000:.0f} ms") for w, o, s in pairs if s > WRITE_BOUND]
    assert not slow, (
        f"old value served later than {WRITE_BOUND * 1000:.0f} ms after a write: {slow}"
    )


def test_every_language_single_node(redis_server: RedisServer, unique: str, tmp_path: Path) -> None:
    ns = Namespace(f"poly-{unique}")
    r = redis.Redis.from_url(redis_server.url)
    r.set("product:1", "v0")
    _scenario(tmp_path, ns, "product:1", f"redis-monitor://127.0.0.1:{redis_server.port}",
              redis_server.url, [r], ["--url", redis_server.url])  # fmt: skip
    r.close()


def test_every_language_on_redis_cluster(
    own_redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    cluster = own_redis_cluster
    # a key whose slot lives on the second primary (not the node the apps are seeded with)
    key = next(
        f"product:{i}" for i in range(1000) if cluster.node_for(f"product:{i}") is cluster.nodes[1]
    )
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    rc.set(key, "v0")
    rc.close()
    primaries = [redis.Redis(port=p) for p in cluster.ports[: cluster.primaries]]
    ns = Namespace(f"poly-{unique}")
    seeds = ",".join(f"127.0.0.1:{p}" for p in cluster.ports[: cluster.primaries])
    _scenario(tmp_path, ns, key, f"redis-monitor://127.0.0.1:{cluster.ports[0]}", cluster.url,
              primaries, ["--cluster", seeds])  # fmt: skip
    for p in primaries:
        p.close()


def test_sharded_pubsub_on_redis_cluster(
    redis_cluster: RedisClusterServers, unique: str, tmp_path: Path
) -> None:
    """The daemon with --sharded-pubsub (SPUBLISH) and apps that SSUBSCRIBE: only the
    channel's shard carries the messages, and the loop holds as with plain pub/sub."""
    cluster = redis_cluster
    key = next(f"sku:{i}" for i in range(1000) if cluster.node_for(f"sku:{i}") is cluster.nodes[2])
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    rc.set(key, "v0")
    ns = Namespace(f"shard-{unique}", sharded=True)
    primaries = [redis.Redis(port=p) for p in cluster.ports[: cluster.primaries]]
    seeds = ",".join(f"127.0.0.1:{p}" for p in cluster.ports[: cluster.primaries])
    watcher = SdkWatcher(rc, ns)
    # With a Java app here, Node kept Go's old value until its TTL in ~1 of 3 runs. After
    # the two sharded pub/sub fixes the stale-read harness led to (the watch's SPUBLISH
    # through a cluster client; the Python subscriber's shard polling), 6 of 6 runs with
    # Java passed (old value served at most 41 ms after a write); which of them caused
    # that miss is not proven, so a recurrence is worth a look at tests/stale first.
    _scenario(tmp_path, ns, key, f"redis-monitor://127.0.0.1:{cluster.ports[0]}", cluster.url,
              primaries, ["--cluster", seeds, "--sharded"], langs=LANGS,
              watcher=watcher)  # fmt: skip
    rc.close()
    for p in primaries:
        p.close()
