"""Where ``hotkeyd top`` reads its data: the snapshots in Redis, or one daemon's ``/topk``."""

from __future__ import annotations

import json
from typing import Any

import redis
from redis.cluster import RedisCluster

from hotkeyd.client.snapshots import read_merged
from hotkeyd.conn.http import http_get
from hotkeyd.conn.redis import connect
from hotkeyd.errors import HotkeydError
from hotkeyd.protocol.wire import Namespace

__all__ = ["TopReader"]


class TopReader:
    """Reads the merged hot set and top keys, again and again on one connection.

    Args:
        redis_url: Redis the daemons publish their snapshots to.
        namespace: their namespace prefix.
        http: a daemon's HTTP endpoint (``http://host:port``) to read instead of Redis.
    """

    def __init__(self, redis_url: str, namespace: str = "hotkeyd", http: str | None = None) -> None:
        self.namespace = Namespace(prefix=namespace)
        self.http = http
        self.redis_url = redis_url
        self._client: redis.Redis | RedisCluster | None = None

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The one Redis client every :meth:`read` uses (``top --watch`` refreshes)."""
        if self._client is None:
            self._client = connect(self.redis_url, check=False)
        return self._client

    def read(self) -> dict[str, Any]:
        """``{"instances": [...], "hot": [...], "top": [...]}`` (wire entries).

        Raises:
            UnreachableError, PublishError: Redis or the endpoint failed (one line).
        """
        if self.http:
            return self._read_http(self.http)
        return read_merged(self.client, self.namespace)

    @staticmethod
    def _read_http(base: str) -> dict[str, Any]:
        url = base.rstrip("/")
        if not url.endswith("/topk"):
            url += "/topk"
        reply = http_get(url)
        try:
            data = json.loads(reply.body)
        except ValueError as exc:
            raise HotkeydError(f"{url} answered {reply.status} without JSON: {exc}") from exc
        if reply.status != 200 or not isinstance(data, dict):
            raise HotkeydError(f"{url} answered {reply.status}: {reply.text[:200]}")
        data.setdefault("instances", [data.get("instance", "?")])
        return data

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> TopReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
