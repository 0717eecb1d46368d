"""Cross-instance invalidation of locally cached keys.

Every write that goes through a :class:`~hotkeyd.client.cache.HotCache` is followed, in
the same pipeline round trip, by a ``PUBLISH`` on ``Namespace.invalidate_channel``;
every HotCache subscribed there drops its copy of the keys, *whether or not the key is
hot in its own view*. Deciding "only broadcast if the key is hot here" is exactly the
bug JD's hotkey users hit: instance A caches a key that instance B (the writer) never
saw as hot, B skips the broadcast, and A serves the old value until the TTL.

Message (JSON, version 1)::

    {"v": 1, "origin": "<cache id>", "keys": [{"key": "item:1"}, {"key": "AAE=", "enc": "base64"}]}

Optionally, :class:`ServerTracking` adds Redis server-assisted invalidation (CLIENT
TRACKING over RESP3) for promoted keys, which also catches writes made by processes
that do not use HotCache. See ``docs/client.md`` for the consistency of each mode.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hotkeyd.client.forksafe import track_fork
from hotkeyd.protocol import strictjson
from hotkeyd.protocol.wire import WireError, decode_key, encode_key
from hotkeyd.ratelog import RateLimitedLog

__all__ = [
    "ServerTracking",
    "TrackingMode",
    "apply_invalidation",
    "decode_invalidation",
    "encode_invalidation",
]

logger = logging.getLogger(__name__)

TrackingMode = Literal["off", "optin", "bcast"]


def encode_invalidation(origin: str, keys: Iterable[bytes]) -> bytes:
    """The payload published for ``keys`` written by cache ``origin``."""
    obj = {"v": 1, "origin": origin, "keys": [encode_key(k) for k in keys]}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_invalidation(payload: bytes) -> tuple[str, list[bytes]]:
    """Parse an invalidation payload; raises :class:`~hotkeyd.protocol.wire.WireError`."""
    try:
        obj = strictjson.loads(payload)
    except strictjson.JSONRejected as exc:
        raise WireError(f"invalidation rejected: {exc}") from None
    if not isinstance(obj, dict) or obj.get("v") != 1 or not isinstance(obj.get("keys"), list):
        raise WireError("invalidation is not a v1 object with a 'keys' list")
    keys = []
    for k in obj["keys"]:
        if not isinstance(k, dict):
            raise WireError(f"bad key entry {k!r}")
        keys.append(decode_key(k))
    return str(obj.get("origin", "")), keys


_bad_log = RateLimitedLog(logger)


def apply_invalidation(payload: bytes, drop: Callable[[bytes], object]) -> bool:
    """Call ``drop(key)`` for each key of an invalidation payload.

    Returns False (after a rate-limited warning) when the payload is malformed, so the
    caller can count it; bad input on the channel is never fatal.
    """
    try:
        _origin, keys = decode_invalidation(payload)
    except WireError as exc:
        _bad_log(logging.WARNING, "bad invalidation message: %s", exc)
        return False
    for k in keys:
        drop(k)
    return True


class ServerTracking:
    """Server-assisted invalidation for promoted keys (CLIENT TRACKING, RESP3).

    A dedicated RESP3 connection reads promoted keys; Redis remembers which keys that
    connection read (``optin``: only reads preceded by ``CLIENT CACHING yes``, i.e.
    only promoted keys) or which prefixes it watches (``bcast``: every write to a
    matching key, read or not), and pushes ``invalidate`` messages on the same
    connection. A small thread drains those pushes every ``poll_interval`` seconds and
    calls ``on_invalidate(key)`` (``on_invalidate(None)``: flush everything, sent by
    Redis on FLUSHALL/FLUSHDB; keys evicted from its tracking table arrive as keys).

    Reads and the drain share one lock, so a hot read through :meth:`read` and the
    pushes never interleave on the socket.

    Args:
        url: Redis URL (``redis://`` or ``rediss://``; AUTH/ACL in the URL).
        mode: ``"optin"`` or ``"bcast"``.
        prefixes: BCAST prefixes (empty = every key: heavy, avoid in production).
        on_invalidate: called with each invalidated key, or None for "flush all".
        on_reset: called after the tracking connection was (re)established; anything
            cached before may have missed invalidations.
        poll_interval: how often pending pushes are drained when no read happens.
    """

    def __init__(
        self,
        url: str,
        mode: TrackingMode,
        *,
        on_invalidate: Callable[[bytes | None], None],
        on_reset: Callable[[], None],
        prefixes: Iterable[str | bytes] = (),
        poll_interval: float = 0.005,
        **redis_kwargs: Any,
    ) -> None:
        if mode not in ("optin", "bcast"):
            raise ValueError(f"tracking mode must be 'optin' or 'bcast', got {mode!r}")
        self.mode = mode
        self.prefixes = list(prefixes)
        self.on_invalidate = on_invalidate
        self.on_reset = on_reset
        self.poll_interval = poll_interval
        self.pushes = 0
        self._warn = RateLimitedLog(logger)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # No silent retries: a reconnect must re-enable tracking (see _connect), or we
        # would cache values that Redis no longer tracks for us.
        opts: dict[str, Any] = {
            **redis_kwargs,
            "protocol": 3,
            "single_connection_client": True,
            "retry": Retry(NoBackoff(), 0),
        }
        self._url, self._opts = url, opts
        self._client = redis.Redis.from_url(url, **opts)
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        track_fork(self)

    def after_fork_in_child(self) -> None:
        """In a forked child: a connection of its own (the parent's socket would mix
        both processes' replies), and the drain thread again if it ran."""
        running = self._thread is not None and not self._stop.is_set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._conn = None
        self._client = redis.Redis.from_url(self._url, **self._opts)
        self.on_reset()  # copies made before the fork are not tracked for this child
        if running:
            try:
                self.start()
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                self._warn(logging.WARNING, "tracking after fork: %s; reads reconnect", exc)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> ServerTracking:
        with self._lock:
            self._connect()
        self._thread = threading.Thread(
            target=self._drain_loop, name="hotkeyd-tracking", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._client.close()

    def _connect(self) -> None:
        """(Re)enable tracking on the dedicated connection; caller holds the lock."""
        conn: Any = getattr(self._client, "connection", None)  # single_connection_client
        assert conn is not None
        conn.disconnect()
        conn.connect()
        conn._parser.set_invalidation_push_handler(self._on_push)
        self._conn = conn
        if self.mode == "optin":
            self._client.client_tracking_on(optin=True)
        else:
            self._client.client_tracking_on(bcast=True, prefix=self.prefixes)
        self.on_reset()

    # --------------------------------------------------------------------- I/O
    def read(self, command: str, *args: Any) -> Any:
        """Run a read of a promoted key on the tracked connection."""
        with self._lock:
            try:
                if self._conn is None:
                    self._connect()
                conn = self._conn
                if self.mode == "optin":
                    # Both commands in one write on *this* connection (a redis-py pipeline
                    # would borrow another connection from the pool).
                    conn.send_packed_command(
                        conn.pack_commands([("CLIENT", "CACHING", "YES"), (command, *args)])
                    )
                    replies = []
                    for _ in range(2):  # read both, even after an error: keep the socket in step
                        try:
                            replies.append(conn.read_response())
                        except redis.ResponseError as exc:
                            replies.append(exc)
                    for rep in replies:
                        if isinstance(rep, redis.ResponseError):
                            raise rep
                    return replies[1]
                conn.send_command(command, *args)
                return conn.read_response()
            except (redis.ConnectionError, redis.TimeoutError):
                self._reconnect_locked()
                raise

    def _drain_loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            with self._lock:
                try:
                    conn = self._conn
                    while conn is not None and conn.can_read(timeout=0):
                        conn.read_response(push_request=True)
                except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                    self._warn(logging.WARNING, "tracking connection lost (%s); reconnecting", exc)
                    self._reconnect_locked()
                except Exception:
                    self._warn(logging.ERROR, "tracking drain failed", exc_info=True)

    def _reconnect_locked(self) -> None:
        try:
            self._connect()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._conn = None
            self._warn(logging.WARNING, "tracking reconnect failed (%s)", exc)
            self.on_reset()

    def _on_push(self, response: Any) -> None:
        """``[b"invalidate", [key, ...]]`` or ``[b"invalidate", None]`` (flush)."""
        self.pushes += 1
        keys = response[1] if len(response) > 1 else None
        if keys is None:
            self.on_invalidate(None)
            return
        for k in keys:
            self.on_invalidate(k if isinstance(k, bytes) else str(k).encode("utf-8"))
