"""HotCache as a drop-in: every other redis-py command passes through, writes invalidate.

``HotCache`` implements the reads it serves locally (GET, HGET, HGETALL, MGET) and the
common writes. Any other attribute is the wrapped client's (``cache.exists``,
``cache.ttl``, ``cache.scan_iter`` ...). Commands that change a string or a hash, or
a key as a whole (:data:`WRITES`), are wrapped so that they also broadcast the
invalidation of the keys they write, like :meth:`HotCache.set`. ``cache.pipeline()``
returns an :class:`InvalidatingPipeline`: every write queued in it invalidates its keys
when the pipeline executes (one PUBLISH for all of them, in the same round trip on a
single Redis; right after it on a cluster).

Commands on other types (lists, sets, streams...) pass through untouched: HotCache
never caches them. A write this table does not know (a Lua script, a module command)
needs an explicit ``cache.invalidate(key)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hotkeyd.protocol.keys import key_bytes

__all__ = [
    "WRITES",
    "AsyncInvalidatingPipeline",
    "Flush",
    "InvalidatingPipeline",
    "make_flush",
    "pass_through",
    "written_keys",
]

Flush = Callable[[Any, list[bytes]], tuple[Callable[[], Any], bool]]

# command -> which arguments are the keys it writes
_FIRST = "first"
WRITES: dict[str, str] = {
    **dict.fromkeys(
        (
            "set",
            "setex",
            "psetex",
            "setnx",
            "setrange",
            "getset",
            "getex",
            "getdel",
            "append",
            "incr",
            "incrby",
            "incrbyfloat",
            "decr",
            "decrby",
            "setbit",
            "bitfield",
            "hset",
            "hsetnx",
            "hmset",
            "hdel",
            "hincrby",
            "hincrbyfloat",
            "expire",
            "pexpire",
            "expireat",
            "pexpireat",
            "persist",
            "restore",
            "move",
        ),
        _FIRST,
    ),
    "delete": "all",
    "unlink": "all",
    "rename": "two",
    "renamenx": "two",
    "copy": "second",
    "mset": "mapping",
    "msetnx": "mapping",
    "bitop": "second",
}


def pass_through(
    client: Any, name: str, write: Callable[[tuple[bytes, ...], Callable[[Any], Any]], Any]
) -> Any:
    """``client.<name>``; a write command comes back wrapped to go through ``write``.

    ``write(keys, add)`` is the cache's own write path (``add(pipe_or_client)`` issues
    the command); for ``redis.asyncio`` it returns a coroutine, which the caller awaits.
    """
    if name.startswith("_") or name == "client":
        raise AttributeError(name)
    attr = getattr(client, name)
    if name not in WRITES or not callable(attr):
        return attr

    def call(*args: Any, **kwargs: Any) -> Any:
        keys = written_keys(name, args, kwargs)
        return write(tuple(keys), lambda p: getattr(p, name)(*args, **kwargs))

    return call


def make_flush(cache: Any) -> Flush:
    """The ``flush`` of an :class:`InvalidatingPipeline` of ``cache`` (sync or asyncio).

    On a single Redis the PUBLISH joins the pipeline; on a cluster it is sent once the
    pipeline executed (a cluster pipeline cannot PUBLISH).
    """
    channel, command = cache._channel, cache._publish_cmd
    drop = cache.local.invalidate

    def publish(payload: bytes) -> Any:  # a coroutine for redis.asyncio: awaited
        return cache.client.execute_command(command, channel, payload)

    publish_after = publish if cache._cluster else None

    def flush(pipe: Any, keys: list[bytes]) -> tuple[Callable[[], Any], bool]:
        payload = cache._payload(keys)

        def drop_all() -> None:
            for kb in keys:
                drop(kb)

        if publish_after is None:
            pipe.execute_command(command, channel, payload)
            return drop_all, True

        def after() -> Any:
            drop_all()
            return publish_after(payload)  # a coroutine for redis.asyncio: awaited

        return after, False

    return flush


def written_keys(command: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[bytes]:
    """The keys ``command(*args, **kwargs)`` writes, as bytes ([] for a read)."""
    how = WRITES.get(command)
    if how is None:
        return []
    if how == "all":
        return [key_bytes(a) for a in args]
    if how == "mapping":
        mapping = args[0] if args else kwargs.get("mapping", {})
        return [key_bytes(k) for k in mapping]
    if how == "two":
        return [key_bytes(a) for a in args[:2]]
    if how == "second":
        return [key_bytes(args[1])] if len(args) > 1 else []
    if args:
        return [key_bytes(args[0])]
    name = kwargs.get("name")
    return [] if name is None else [key_bytes(name)]


class InvalidatingPipeline:
    """A redis-py pipeline whose queued writes invalidate their keys on ``execute()``.

    Args:
        pipe: the client's pipeline.
        flush: ``flush(pipe, keys) -> (after, queued)``, called by :meth:`execute`:
            it queues the invalidation in ``pipe`` (``queued`` True: its reply is
            dropped from the results) or leaves it to ``after()``, which runs once the
            pipeline executed (a cluster pipeline cannot PUBLISH) and drops the
            local copies.
    """

    def __init__(self, pipe: Any, flush: Flush) -> None:
        self._pipe = pipe
        self._flush = flush
        self._keys: list[bytes] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._pipe, name)
        if name not in WRITES or not callable(attr):
            return attr

        def queue(*args: Any, **kwargs: Any) -> InvalidatingPipeline:
            self._keys.extend(written_keys(name, args, kwargs))
            attr(*args, **kwargs)
            return self

        return queue

    def _take_keys(self) -> list[bytes]:
        keys, self._keys = list(dict.fromkeys(self._keys)), []
        return keys

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        keys = self._take_keys()
        after, queued = self._flush(self._pipe, keys) if keys else (None, False)
        try:
            results: list[Any] = self._pipe.execute(raise_on_error=raise_on_error)
        finally:
            if after is not None:
                after()  # also when the pipeline failed: its effect is unknown
        return results[:-1] if queued else results

    def __enter__(self) -> InvalidatingPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pipe.reset()

    def __len__(self) -> int:
        return len(self._pipe)


class AsyncInvalidatingPipeline(InvalidatingPipeline):
    """:class:`InvalidatingPipeline` for ``redis.asyncio`` (``await pipe.execute()``)."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:  # type: ignore[override]
        keys = self._take_keys()
        after, queued = self._flush(self._pipe, keys) if keys else (None, False)
        try:
            results: list[Any] = await self._pipe.execute(raise_on_error=raise_on_error)
        finally:
            if after is not None:
                await _maybe_await(after())
        return results[:-1] if queued else results

    async def __aenter__(self) -> AsyncInvalidatingPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._pipe.reset()


async def _maybe_await(value: Any) -> None:
    if hasattr(value, "__await__"):
        await value
