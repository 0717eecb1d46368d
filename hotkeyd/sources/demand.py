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

Defences, cheapest first (each drop counted in ``hotkeyd_demand_reports_dropped_total``
by reason, logged at a limited rate, and shown as degraded health for a while):

1. size (``oversized``, before anything else);
2. the reporter key's HMAC when the daemon has one (``unsigned``, before JSON parsing, so
   a flood of forged reports costs a MAC per message and no real demand);
3. the wire format (``malformed`` and the other reasons of ``DemandError``);
4. freshness: ``ts`` older than ``max_age`` or as far in the future (``stale``);
5. the seq window per app: a (app, seq) seen already, or older than the window
   (``duplicate``);
6. the per-app budget: reports per second (``rate_limited``: one sender cannot crowd
   out the others) and reads per second summed over the app's entries (``budget``);
7. the queue bound (``overflow``: load shed until the loop catches up).

State per app is bounded (``max_apps``, least recently heard evicted), as is the queue,
so memory stays bounded whatever Redis buffers. A Redis outage is retried with backoff
and reported as degraded health. Reports lost can only let keys cool: the fail-safe
direction.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.redis import open_client, parse_redis_url, translate_redis_error
from hotkeyd.errors import HotkeydError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import (
    MAX_AGE,
    MAX_INTERVAL,
    MAX_REPORT_BYTES,
    MIN_INTERVAL,
    DemandError,
    DemandReport,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["DEFAULT_APP_BUDGET", "DEFAULT_MAX_RATE", "DemandIntake", "Served"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_RATE = 10_000_000  # reads/s one app can plausibly serve of one key
DEFAULT_APP_BUDGET = 20_000_000  # reads/s one app may report in all (all keys)
SEQ_WINDOW = 128  # seqs per app remembered below the highest seen
HEALTH_HOLD = 10.0  # s a drop keeps /healthz degraded
Served = tuple[int, list[bytes], list[int]]  # (db, keys, counts) of one report


@dataclass(slots=True)
class _App:
    """What the intake remembers of one app: its seq window and its budgets."""

    top: int  # highest seq accepted
    seen: set[int] = field(default_factory=set)  # accepted seqs in (top - SEQ_WINDOW, top]
    reads: float = 0.0  # read budget left (refilled at app_budget/s, at most one second's)
    reports: float = 0.0  # report budget left (refilled at 1/MIN_INTERVAL * 2 per second)
    at: float = 0.0  # monotonic time of the last refill

    def fresh_seq(self, seq: int) -> bool:
        """Record ``seq``; False for a duplicate or one below the window."""
        if seq > self.top:
            self.top = seq
            self.seen = {s for s in self.seen if s > seq - SEQ_WINDOW}
        elif seq <= self.top - SEQ_WINDOW or seq in self.seen:
            return False
        self.seen.add(seq)
        return True


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
        auth: reporter keys; when given, only reports signed with one of them are read
            (the others are dropped unparsed, ``unsigned``).
        max_age: reports with a ``ts`` older than this (s), or this far ahead, are
            dropped (``stale``).
        app_budget: reads per second one app may report in all; beyond it reports are
            dropped (``budget``). Reports per second per app are capped at twice the
            fastest interval allows (``rate_limited``).
        max_apps: apps remembered at most (seq window and budgets); the least recently
            heard is forgotten first.
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
        auth: MessageAuth | None = None,
        max_age: float = MAX_AGE,
        app_budget: float = DEFAULT_APP_BUDGET,
        max_apps: int = 10_000,
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
        self.auth = auth
        self.max_age = max_age
        self.app_budget = app_budget
        self.max_apps = max_apps
        self.report_rate = 2.0 / MIN_INTERVAL
        self._apps: OrderedDict[str, _App] = OrderedDict()
        self.last_drop: tuple[float, str] | None = None  # (monotonic time, reason)
        self.lost_subscription = 0.0  # monotonic time the subscription was last lost
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
        # Told of each admitted report, in this intake's thread: (app, ts, interval_ms,
        # [(db, key, n)]) with the counts as capped (the web console's per-app demand).
        self.on_report: Callable[[str, float, int, list[tuple[int, bytes, int]]], None] | None = (
            None
        )

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
        if len(data) > self.max_bytes:
            return self._drop("oversized", "demand report of %d bytes dropped", len(data))
        if self.auth is not None:
            raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
            body = self.auth.verify(raw)
            if body is None:
                return self._drop("unsigned", "demand report without a valid reporter MAC")
            data = body
        try:
            report = DemandReport.loads(data, max_bytes=self.max_bytes)
        except DemandError as exc:
            return self._drop(exc.reason, "bad demand report on %s: %s", self.channel, exc)
        now = self.clock.time()
        if not now - self.max_age <= report.ts <= now + self.max_age:
            return self._drop(
                "stale",
                "demand report of app %r: ts %.3f, now %.3f",
                report.app[:64],
                report.ts,
                now,
            )
        reason = self._admit(report)
        if reason is not None:
            return self._drop(reason, "demand report of app %r: %s", report.app[:64], reason)
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
        if self.on_report is not None:
            served = [
                (db, k, n) for db, (ks, ns) in by_db.items() for k, n in zip(ks, ns, strict=True)
            ]
            self.on_report(report.app, report.ts, report.interval_ms, served)
        return True

    def _admit(self, report: DemandReport) -> str | None:
        """The app's seq window and budgets; a drop reason, or None when admitted."""
        mono = self.clock.monotonic()
        app = self._apps.get(report.app)
        if app is None:
            app = _App(report.seq - 1, reads=self.app_budget, reports=self.report_rate, at=mono)
            self._apps[report.app] = app
            while len(self._apps) > self.max_apps:
                self._apps.popitem(last=False)
        else:
            self._apps.move_to_end(report.app)
            dt = max(0.0, mono - app.at)
            app.at = mono
            app.reads = min(self.app_budget, app.reads + dt * self.app_budget)
            app.reports = min(self.report_rate, app.reports + dt * self.report_rate)
        if not app.fresh_seq(report.seq):
            return "duplicate"
        if app.reports < 1.0:
            return "rate_limited"
        total = report.total
        if total > app.reads:
            return "budget"
        app.reports -= 1.0
        app.reads -= total
        return None

    def problem(self) -> str | None:
        """Why health is degraded: a recent drop or a lost subscription, else None."""
        now = self.clock.monotonic()
        if self.error is not None:
            return self.error
        if self.lost_subscription and now - self.lost_subscription < HEALTH_HOLD:
            return "subscription lost recently"
        if self.last_drop is not None and now - self.last_drop[0] < HEALTH_HOLD:
            return f"reports dropped ({self.last_drop[1]})"
        return None

    def _drop(self, reason: str, msg: str, *args: object) -> bool:
        self.metrics.demand_dropped.labels(reason=reason).inc()
        self.last_drop = (self.clock.monotonic(), reason)
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
                if self.connected:
                    self._lost()
                self.connected, self.error = False, str(err)
                self._log.warning("demand:conn", "demand intake: %s; retrying", err)
                self._stop.wait(self._backoff.next_delay())
            except Exception:  # a bug must not end the intake for good
                if self.connected:
                    self._lost()
                self.connected = False
                self._log.log(logging.ERROR, "demand:bug", "demand intake failed", exc_info=True)
                self._stop.wait(self._backoff.next_delay())
            finally:
                if pubsub is not None:
                    pubsub.close()
                if client is not None:
                    client.close()
        self.connected = False

    def _lost(self) -> None:
        self.lost_subscription = self.clock.monotonic()
        self.metrics.demand_dropped.labels(reason="subscription_lost").inc()
