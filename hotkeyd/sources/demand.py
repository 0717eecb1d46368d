"""The daemon's demand intake: reads app caches served locally, reported over Redis.

Apps that serve a hot key from their local cache report how many reads they served
(:mod:`hotkeyd.protocol.demand`) on ``<prefix>:demand:<instance>``: the instance that announced
the key. This intake subscribes to its own instance's channel in a thread of its own,
parses and validates every report there (untrusted input: schema, size, entry count,
absurd counts), and queues the good ones grouped by database. The service's loop takes
them with :meth:`DemandIntake.drain`, which never blocks and hands over a bounded
amount of work per call, so the tick can never wait on it; the detector then adds the
counts for the keys that are hot here (see ``Detector.ingest_served``).

It is not a :class:`~hotkeyd.sources.base.Source`: it never ends (a finite input such
as a file still ends the daemon) and it only ever refreshes keys already hot.

Bad input is counted (``hotkeyd_demand_reports_dropped_total{reason}``), logged at a
limited rate, and dropped; a Redis outage is retried with backoff and reported as
degraded health. Reports lost meanwhile can only let keys cool: the fail-safe
direction.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

import redis

from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.redis import open_client, parse_redis_url, translate_redis_error
from hotkeyd.errors import HotkeydError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.demand import (
    MAX_INTERVAL,
    MAX_REPORT_BYTES,
    MIN_INTERVAL,
    DemandError,
    DemandReport,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["DEFAULT_MAX_RATE", "DemandIntake", "Served"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_RATE = 10_000_000  # reads/s one app can plausibly serve of one key
Served = tuple[int, list[bytes], list[int]]  # (db, keys, counts) of one report


class DemandIntake:
    """Subscribes to ``<prefix>:demand:<instance>`` and queues validated reports.

    Args:
        url: Redis URL (the one the daemon publishes to).
        namespace: channel names.
        instance: this daemon's instance id.
        metrics: counters of reports received, dropped and entries ignored.
        clock: time source of the rate-limited log.
        max_bytes: larger reports are dropped unparsed (``oversized``).
        max_rate: a key's count in one report (the sum, if an entry repeats) above
            ``max_rate * interval`` (interval clamped to 0.25-0.5 s) is capped to it
            and counted (``capped``).
        max_pending: entries queued at most; reports beyond it are dropped
            (``overflow``) until the loop catches up.
        drain_entries: entries handed over per :meth:`drain` at most.
    """

    def __init__(
        self,
        url: str,
        namespace: Namespace,
        instance: str,
        *,
        metrics: Metrics,
        clock: Clock | None = None,
        max_bytes: int = MAX_REPORT_BYTES,
        max_rate: float = DEFAULT_MAX_RATE,
        max_pending: int = 200_000,
        drain_entries: int = 20_000,
    ) -> None:
        self.url = url
        self._settings = parse_redis_url(url)  # a bad URL fails here, not in the thread
        self.channel = namespace.demand_channel(instance)
        self.sharded = namespace.sharded
        self.metrics = metrics
        self.clock = clock or SystemClock()
        self.max_bytes = max_bytes
        self.max_rate = max_rate
        self.max_pending = max_pending
        self.drain_entries = drain_entries
        self.connected = False
        self.connects = 0  # subscriptions made (1 + reconnects)
        self.error: str | None = None  # last connection problem (health shows it)
        self._log = RateLimitedLog(logger, 10.0, self.clock.monotonic)
        self._lock = threading.Lock()
        self._queue: deque[Served] = deque()
        self._pending = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = Backoff(0.1, 5.0)

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hotkeyd-demand", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- the loop's side ----------------------------------------------------------------
    def drain(self) -> list[Served]:
        """Queued reports, up to ``drain_entries`` entries; never blocks on I/O."""
        out: list[Served] = []
        budget = self.drain_entries
        with self._lock:
            while self._queue and budget > 0:
                item = self._queue.popleft()
                self._pending -= len(item[1])
                budget -= len(item[1])
                out.append(item)
        return out

    def counted(self, added: int, ignored: int) -> None:
        """What the detector did with drained entries (for the metrics)."""
        if added:
            self.metrics.demand_local.inc(added)
        if ignored:
            self.metrics.demand_ignored.labels(reason="not_hot").inc(ignored)

    # -- the intake thread --------------------------------------------------------------
    def feed(self, data: Any) -> bool:
        """Validate one raw message and queue it; False (counted, logged) when dropped."""
        if not isinstance(data, (bytes, str)):
            return self._drop("malformed", "demand message of type %s", type(data).__name__)
        try:
            report = DemandReport.loads(data, max_bytes=self.max_bytes)
        except DemandError as exc:
            return self._drop(exc.reason, "bad demand report on %s: %s", self.channel, exc)
        self.metrics.demand_reports.inc()
        interval = min(MAX_INTERVAL, max(MIN_INTERVAL, report.interval_ms / 1000.0))
        cap = max(1, int(self.max_rate * interval))
        # A key listed twice is one key: its counts add up before the cap, so repeating
        # an entry cannot multiply what one report may claim.
        per_key: dict[tuple[int, bytes], int] = {}
        for e in report.entries:
            per_key[e.db, e.key] = per_key.get((e.db, e.key), 0) + e.n
        by_db: dict[int, tuple[list[bytes], list[int]]] = {}
        capped = 0
        for (db, key), n in per_key.items():
            if n > cap:
                n, capped = cap, capped + 1
            keys, counts = by_db.setdefault(db, ([], []))
            keys.append(key)
            counts.append(n)
        if capped:
            self.metrics.demand_ignored.labels(reason="capped").inc(capped)
            self._log.warning(
                "demand:capped",
                "demand report of app %r: %d counts above %d capped",
                report.app[:64],
                capped,
                cap,
            )
        with self._lock:
            if self._pending + len(per_key) > self.max_pending:
                overflow = True
            else:
                overflow = False
                for db, (keys, counts) in by_db.items():
                    self._queue.append((db, keys, counts))
                self._pending += len(per_key)
        if overflow:
            return self._drop("overflow", "demand intake full (%d entries pending)", self._pending)
        return True

    def _drop(self, reason: str, msg: str, *args: object) -> bool:
        self.metrics.demand_dropped.labels(reason=reason).inc()
        self._log.warning(f"demand:{reason}", msg, *args)
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            client: Any = None
            pubsub: Any = None
            try:
                client = open_client(self._settings, socket_connect_timeout=3.0)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                if self.sharded:  # SPUBLISH'ed reports: the channel's shard only
                    pubsub.ssubscribe(self.channel)
                else:
                    pubsub.subscribe(self.channel)
                get = getattr(pubsub, "get_sharded_message", None) if self.sharded else None
                get = get or pubsub.get_message
                self.connected, self.error = True, None
                self.connects += 1
                self._backoff.reset()
                while not self._stop.is_set():
                    msg = get(timeout=0.25)
                    if msg is not None and msg.get("type") in ("message", "smessage"):
                        self.feed(msg.get("data"))
            except (redis.RedisError, OSError, HotkeydError) as exc:
                err = translate_redis_error(exc, self.url)
                self.connected, self.error = False, str(err)
                self._log.warning("demand:conn", "demand intake: %s; retrying", err)
                self._stop.wait(self._backoff.next_delay())
            except Exception:  # a bug must not end the intake for good
                self.connected = False
                self._log.log(logging.ERROR, "demand:bug", "demand intake failed", exc_info=True)
                self._stop.wait(self._backoff.next_delay())
            finally:
                if pubsub is not None:
                    pubsub.close()
                if client is not None:
                    client.close()
        self.connected = False
