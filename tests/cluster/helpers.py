"""Helpers of the cluster tests: keys on a chosen node, a MONITOR-tap daemon on every primary."""

from __future__ import annotations

from pathlib import Path

import redis

from hotkeyd.testing import RedisClusterServers, RedisServer
from tests.service.daemon import Daemon

RULES = """
[default]
threshold = 200
ttl = 3.0
cooldown = 1.0
"""


def key_on(cluster: RedisClusterServers, node: RedisServer, prefix: str) -> str:
    """A key ``<prefix>:<n>`` whose slot ``node`` serves now."""
    for n in range(10_000):
        key = f"{prefix}:{n}"
        if cluster.node_for(key) is node:
            return key
    raise AssertionError(f"no key of {prefix!r} lands on port {node.port}")


def get_calls(node: RedisServer, cmd: str = "get") -> int:
    """How many times ``node`` ran ``cmd`` (INFO commandstats)."""
    with redis.Redis(port=node.port) as r:
        stats = r.info("commandstats")
    return int(stats.get(f"cmdstat_{cmd}", {}).get("calls", 0))


def tap_daemon(
    cluster: RedisClusterServers, prefix: str, tmp_path: Path, *extra: str, nodes: int = 3
) -> Daemon:
    """``hotkeyd run`` tapping the first ``nodes`` nodes with MONITOR, publishing to the cluster."""
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    sources: list[str] = []
    for node in cluster.nodes[:nodes]:
        sources += ["-s", f"redis-monitor://127.0.0.1:{node.port}?cluster=no"]
    return Daemon(
        *sources,
        "--redis-url",
        cluster.nodes[1].url,
        "--namespace",
        prefix,
        "--rules",
        str(rules),
        *extra,
    )
