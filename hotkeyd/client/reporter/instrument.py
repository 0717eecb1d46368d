"""Record the keys of every command a redis-py client sends, into a :class:`Reporter`."""

from __future__ import annotations

from typing import Any

from hotkeyd.client.reporter.core import Reporter, as_bytes

__all__ = ["command_keys", "instrument"]

_FIRST_KEY_NAMES = """
    GET SET SETEX PSETEX SETNX GETSET GETDEL GETEX APPEND STRLEN INCR DECR INCRBY DECRBY
    INCRBYFLOAT GETRANGE SETRANGE GETBIT SETBIT BITCOUNT BITPOS BITFIELD BITFIELD_RO EXPIRE PEXPIRE
    EXPIREAT PEXPIREAT EXPIRETIME PEXPIRETIME TTL PTTL PERSIST TYPE DUMP RESTORE HGET HSET HSETNX
    HMGET HMSET HGETALL HDEL HEXISTS HINCRBY HINCRBYFLOAT HKEYS HVALS HLEN HSTRLEN HSCAN HRANDFIELD
    LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LREM LTRIM LINSERT LPOS SADD SREM
    SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SSCAN ZADD ZREM ZSCORE ZMSCORE ZINCRBY
    ZCARD ZCOUNT ZRANGE ZRANGEBYSCORE ZREVRANGE ZREVRANGEBYSCORE ZRANK ZREVRANK ZREMRANGEBYRANK
    ZREMRANGEBYSCORE ZREMRANGEBYLEX ZSCAN ZRANGEBYLEX ZREVRANGEBYLEX ZLEXCOUNT ZPOPMIN ZPOPMAX
    ZRANDMEMBER PFADD PFCOUNT GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH GEORADIUS GEORADIUSBYMEMBER
    XADD XLEN XRANGE XREVRANGE XDEL XTRIM XACK XCLAIM XAUTOCLAIM XPENDING SORT SORT_RO
    JSON.GET JSON.SET JSON.DEL
"""
_FIRST_KEY = frozenset(_FIRST_KEY_NAMES.split()) | {"MEMORY USAGE"}
_ALL_KEYS = frozenset(("MGET", "DEL", "UNLINK", "EXISTS", "TOUCH"))
_PAIRS = frozenset(("MSET", "MSETNX"))
_SCRIPTS = frozenset(("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"))


def command_keys(args: tuple[Any, ...]) -> list[Any]:
    """Keys a redis-py ``execute_command(*args)`` call touches, for common commands.

    The first key for single-key commands, every key for MGET/DEL/EXISTS/MSET, and the
    declared keys of EVAL/FCALL. Unknown or key-less commands (PING, PUBLISH, SCAN) give [].
    """
    if len(args) < 2:
        return []
    name = args[0]
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    name = str(name).upper()
    if name in _FIRST_KEY:
        return [args[1]]
    if name in _ALL_KEYS:
        return list(args[1:])
    if name in _PAIRS:
        return list(args[1::2])
    if name in _SCRIPTS:
        try:
            numkeys = int(args[2])
        except (IndexError, TypeError, ValueError):
            return []
        return list(args[3 : 3 + numkeys])
    if name == "OBJECT" and len(args) > 2:
        return [args[2]]
    return []


def _record_keys(reporter: Reporter, args: tuple[Any, ...]) -> None:
    for k in command_keys(args):
        kb = as_bytes(k)
        if kb is not None:
            reporter.record(kb)
        else:  # not a key redis-py could send: counted as dropped, never silently lost
            reporter._reject(f"{type(k).__name__} is not a key")


def instrument(client: Any, reporter: Reporter) -> Any:
    """Make a redis-py client record the key of every command it sends; returns the client.

    Wraps the instance's ``execute_command`` (every redis-py command method goes through it)
    and the pipelines it creates. The cost is one ``record()`` per key on top of the
    command; commands are sent unchanged.
    """
    inner = client.execute_command

    def execute_command(*args: Any, **options: Any) -> Any:
        _record_keys(reporter, args)
        return inner(*args, **options)

    client.execute_command = execute_command
    make_pipeline = getattr(client, "pipeline", None)
    if make_pipeline is not None:

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = make_pipeline(*args, **kwargs)
            queue = pipe.execute_command

            def pipe_execute_command(*cargs: Any, **options: Any) -> Any:
                _record_keys(reporter, cargs)
                return queue(*cargs, **options)

            pipe.execute_command = pipe_execute_command
            return pipe

        client.pipeline = pipeline
    return client
