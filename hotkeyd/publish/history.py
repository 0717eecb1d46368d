"""History: every hot/cool transition in a capped Redis Stream, and a reader for it.

The running daemon appends one stream entry per transition to ``{P}:history``
(:attr:`hotkeyd.protocol.wire.Namespace.history`), from a thread of its own with a bounded queue,
so a slow or unreachable Redis never stalls detection (entries that do not fit are
dropped and counted in ``hotkeyd_history_dropped_total``). When the daemon stops, the
keys still hot get a ``cool`` entry with reason ``stop``, so every interval is closed.

Bounds (both applied; documented defaults):

- count: ``XADD ... MAXLEN <history_maxlen>`` (default 10,000 entries, about 2 MB);
- age: ``XTRIM MINID`` drops entries older than ``history_max_age`` (default 4 days,
  like the hot-key records ops consoles keep), checked once a minute.

Entry fields: ``type`` (hot/cool), ``key`` (+ ``enc: base64`` for binary keys), ``db``,
``rule``, ``at`` (event time of the transition, Unix s), ``since`` (when it turned hot),
``rate``, ``peak`` (highest rate while hot), ``reason`` (hot, cool, evict, ignore, stop),
``instance``, ``lag_ms``.

:func:`read_history` turns the entries into intervals (start, end, peak, rule) for
``hotkeyd history``.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.detector.config import Transition
from hotkeyd.detector.glob import Glob
from hotkeyd.detector.intervals import Interval
from hotkeyd.errors import PublishError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import Namespace, decode_key, encode_key
from hotkeyd.ratelog import RateLimitedLog

__all__ = [
    "DEFAULT_MAXLEN",
    "DEFAULT_MAX_AGE",
    "HistoryWriter",
    "intervals",
    "read_history",
]

logger = logging.getLogger(__name__)

DEFAULT_MAXLEN = 10_000
DEFAULT_MAX_AGE = 4 * 86400.0
_TRIM_EVERY = 60.0
_QUEUE = 10_000


def _fields(t: Transition, instance: str, lag_ms: int) -> dict[str, str]:
    out = {k: str(v) for k, v in encode_key(t.key).items()}
    out.update(
        type=t.kind,
        db=str(t.db),
        rule=t.rule,
        at=f"{t.at:.3f}",
        since=f"{t.since:.3f}",
        rate=f"{t.rate:.3f}",
        peak=f"{t.peak:.3f}",
        reason=t.reason,
        instance=instance,
        lag_ms=str(lag_ms),
    )
    return out


class HistoryWriter:
    """Appends transitions to the history stream from a background thread.

    Args:
        client: a redis-py client; None with ``connect``.
        connect: opens the client on first write, from the writer's thread, so a Redis
            that is down at start-up is retried like any failed write. The daemon passes
            ``hotkeyd.conn.redis.open_client``: on a Redis Cluster that is a cluster
            client, so each XADD goes to the primary owning the stream's slot (a plain
            client to the URL's node was answered MOVED whenever the slot lived elsewhere).
        namespace: where the stream lives.
        instance: this daemon's id (stored with each entry).
        maxlen: most entries kept.
        max_age: seconds an entry is kept.
        clock: time source (trimming by age, lag).
        metrics: ``hotkeyd_history_entries_total`` is counted there when given.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        connect: Callable[[], Any] | None = None,
        namespace: Namespace,
        instance: str,
        maxlen: int = DEFAULT_MAXLEN,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if maxlen < 1 or not max_age > 0:
            raise ValueError(f"history bounds must be positive, got {maxlen=} {max_age=}")
        if (client is None) == (connect is None):
            raise ValueError("give a client or connect, not both")
        self._client = client
        self._connect = connect
        self.key = namespace.history
        self.instance = instance
        self.maxlen = maxlen
        self.max_age = max_age
        self._clock = clock or SystemClock()
        self._queue: collections.deque[dict[str, str]] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._trimmed_at = -_TRIM_EVERY
        self._log = RateLimitedLog(logger, 10.0, self._clock.monotonic)
        self.written = 0
        self.dropped = 0
        self._metrics = metrics

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hotkeyd-history", daemon=True)
            self._thread.start()

    def record(self, transitions: Iterable[Transition], lag_ms: int = 0) -> None:
        """Queue ``transitions`` (never blocks; overflow is dropped and counted)."""
        items = [_fields(t, self.instance, lag_ms) for t in transitions]
        if not items:
            return
        with self._cond:
            room = _QUEUE - len(self._queue)
            if len(items) > room:
                lost = len(items) - max(room, 0)
                self.dropped += lost
                if self._metrics is not None:
                    self._metrics.history_entries.labels(result="dropped").inc(lost)
                self._log.warning("full", "history: queue full, %d entries dropped", self.dropped)
                items = items[: max(room, 0)]
            self._queue.extend(items)
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (within ``timeout``), then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        if self._queue:
            logger.warning("history: %d entries not written before exit", len(self._queue))
        mine = self._connect is not None and self._client is not None  # never the caller's
        if mine and thread is not None and not thread.is_alive():
            self._client.close()

    def _run(self) -> None:
        backoff = Backoff(0.1, 5.0)
        while True:
            with self._cond:
                if not self._queue and not self._stop:
                    # until an entry, the stop, or the next age trim (an idle daemon
                    # wakes once a minute, not once a second)
                    due = self._trimmed_at + _TRIM_EVERY - self._clock.monotonic()
                    self._cond.wait(min(max(due, 0.001), _TRIM_EVERY))
                if self._stop and not self._queue:
                    return
                batch = list(self._queue)
            if not batch and self._clock.monotonic() - self._trimmed_at < _TRIM_EVERY:
                continue
            try:
                self._write(batch)
            except Exception as exc:  # Redis down: keep the entries, retry with backoff
                self._log.warning("write", "history: cannot write to Redis (%s); retrying", exc)
                if self._stop:
                    return
                with self._cond:
                    self._cond.wait(backoff.next_delay())
                continue
            backoff.reset()
            with self._cond:
                for _ in batch:
                    self._queue.popleft()
            self.written += len(batch)
            if self._metrics is not None:
                self._metrics.history_entries.labels(result="written").inc(len(batch))

    def _write(self, batch: Sequence[dict[str, str]]) -> None:
        if self._client is None:
            assert self._connect is not None
            self._client = self._connect()
        now = self._clock.monotonic()
        pipe = self._client.pipeline(transaction=False)
        for fields in batch:
            pipe.xadd(self.key, fields, maxlen=self.maxlen, approximate=False)
        if now - self._trimmed_at >= _TRIM_EVERY or not batch:
            cutoff_ms = int((self._clock.time() - self.max_age) * 1000)
            pipe.xtrim(self.key, minid=f"{max(cutoff_ms, 0)}-0", approximate=False)
            self._trimmed_at = now
        if batch or len(pipe):
            pipe.execute()


def intervals(entries: Iterable[dict[str, str]]) -> list[Interval]:
    """Pair hot/cool entries (oldest first) into intervals per (instance, db, key)."""
    open_: dict[tuple[str, int, bytes], dict[str, str]] = {}
    out: list[Interval] = []
    for e in entries:
        try:
            key = decode_key(e)
            db = int(e.get("db", 0))
            ident = (e.get("instance", ""), db, key)
            if e.get("type") == "hot":
                open_[ident] = e
                continue
            opened = open_.pop(ident, None)
            start = float(e.get("since") or (opened or {}).get("at", e["at"]))
            out.append(
                Interval(
                    key=key,
                    db=db,
                    rule=e.get("rule", ""),
                    start=start,
                    end=float(e["at"]),
                    peak=float(e.get("peak", 0.0)),
                    instance=ident[0],
                    reason=e.get("reason", ""),
                )
            )
        except (KeyError, ValueError) as exc:
            logger.warning("history: skipping a malformed entry %r: %s", e, exc)
    for (instance, db, key), e in open_.items():
        out.append(
            Interval(
                key=key,
                db=db,
                rule=e.get("rule", ""),
                start=float(e["at"]),
                end=None,
                peak=float(e.get("peak", e.get("rate", 0.0))),
                instance=instance,
            )
        )
    out.sort(key=lambda i: (i.start, i.key))
    return out


def read_history(
    client: Any,
    namespace: Namespace,
    *,
    since: float,
    until: float | None = None,
    pattern: bytes | None = None,
    slack: float = 3600.0,
) -> list[Interval]:
    """Intervals that overlap ``[since, until]`` (Unix s), optionally keys matching a glob.

    Entries are read from ``slack`` seconds before ``since`` so that an interval that began
    earlier is still paired with its start.
    """
    glob = Glob(pattern) if pattern is not None else None
    lo = max(0, int((since - slack) * 1000))
    hi = "+" if until is None else str(int(until * 1000) + 1)
    try:
        raw = client.xrange(namespace.history, min=str(lo), max=hi)
    except Exception as exc:
        raise PublishError(f"cannot read the history stream {namespace.history}: {exc}") from exc
    entries = [
        {
            k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
            for k, v in fields.items()
        }
        for _id, fields in raw
    ]
    out = []
    for iv in intervals(entries):
        if iv.end is not None and iv.end < since:
            continue
        if until is not None and iv.start > until:
            continue
        if glob is not None and not glob.match(iv.key):
            continue
        out.append(iv)
    return out
