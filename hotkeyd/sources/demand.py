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

import contextlib
import logging
import socket
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

try:  # the daemon extra installs it; without it redis-py reads the subscription
    import hiredis
except ImportError:  # pragma: no cover - depends on the install
    hiredis = None  # type: ignore[assignment]

from hotkeyd import native_or_twin
from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.conn.redis import open_client, parse_redis_url, translate_redis_error
from hotkeyd.errors import HotkeydError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol import limits, strictjson
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import (
    MAX_AGE,
    MAX_ENTRIES,
    MAX_INTERVAL,
    MAX_N,
    MAX_REPORT_BYTES,
    MIN_INTERVAL,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["DEFAULT_APP_BUDGET", "DEFAULT_MAX_RATE", "IMPLEMENTATION", "DemandIntake", "Served"]

logger = logging.getLogger(__name__)

_impl, IMPLEMENTATION = native_or_twin("hotkeyd.sources._demand", "hotkeyd.sources._demand_py")

DEFAULT_MAX_RATE = 10_000_000  # reads/s one app can plausibly serve of one key
DEFAULT_APP_BUDGET = 20_000_000  # reads/s one app may report in all (all keys)
SEQ_WINDOW = 128  # seqs per app remembered below the highest seen
HEALTH_HOLD = 10.0  # s a drop keeps /healthz degraded
_RAW_WAKE = 5.0  # s an idle raw reader waits in recv() before re-checking its stop
_RAW_RECV = 1 << 20  # bytes one recv() of the raw reader takes at most
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
        read_batch: messages read from the subscription per parser call at most.
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
        read_batch: int = 1024,
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
        self.read_batch = read_batch
        self.report_rate = 2.0 / MIN_INTERVAL
        self._limits = (
            max_bytes,
            MAX_ENTRIES,
            limits.SEQ_MAX,
            limits.NAME_CHARS_MAX,
            limits.DEMAND_INTERVAL_MS_MAX,
            limits.DB_MAX,
            MAX_N,
            strictjson.MAX_DEPTH,
            float(max_rate),
            MIN_INTERVAL,
            MAX_INTERVAL,
        )
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
        self._sock: socket.socket | None = None  # the raw reader's, for close() to wake
        self._backoff = Backoff(0.1, 5.0)
        # Told of each admitted report, in this intake's thread: (app, ts, interval_ms,
        # [(db, keys, counts)], size in bytes) with the counts as capped (the web console's
        # per-app demand). The lists are the queued ones: read them, never change them.
        self.on_report: Callable[[str, float, int, list[Served], int], None] | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hotkeyd-demand", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:  # wake a recv() waiting out its timeout
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- the loop's side ----------------------------------------------------------------
    def drain(self) -> list[Served]:
        """Queued entries, up to about ``drain_entries``, merged into one
        ``(db, keys, counts)`` per database (so the detector takes each in one call);
        never blocks on I/O."""
        items: list[Served] = []
        budget = self.drain_entries
        with self._lock:
            while self._queue and budget > 0:
                item = self._queue.popleft()
                self._pending -= len(item[1])
                budget -= len(item[1])
                items.append(item)
        if len(items) < 2:
            return items
        merged: dict[int, Served] = {}
        for db, keys, counts in items:
            m = merged.get(db)
            if m is None:
                merged[db] = (db, list(keys), list(counts))
            else:
                m[1].extend(keys)
                m[2].extend(counts)
        return list(merged.values())

    def counted(self, added: int, ignored: int) -> None:
        """What the detector did with drained entries (for the metrics)."""
        if added:
            self.metrics.demand_local.inc(added)
        if ignored:
            self.metrics.demand_ignored.labels(reason="not_hot").inc(ignored)

    # -- the intake thread --------------------------------------------------------------
    def feed(self, data: Any) -> bool:
        """Validate one raw message and queue it; False (counted, logged) when dropped."""
        return self.feed_many([data]) == 1

    def feed_many(self, messages: Sequence[Any]) -> int:
        """Validate raw messages and queue the good ones; returns how many were queued.

        The checks before parsing (type, size, the reporter MAC) run per message; the
        parsing and validation of all that pass runs in one call of the C core
        (:mod:`hotkeyd.sources._demand`, or its twin), which also merges and caps the
        entries; then freshness, the seq window and the budgets run per report, and the
        queue takes them under one lock.
        """
        bodies: list[bytes] = []
        for data in messages:
            if not isinstance(data, (bytes, str)):
                self._drop("malformed", "demand message of type %s", type(data).__name__)
                continue
            if len(data) > self.max_bytes:
                self._drop("oversized", "demand report of %d bytes dropped", len(data))
                continue
            raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
            if self.auth is not None:
                body = self.auth.verify(raw)
                if body is None:
                    self._drop("unsigned", "demand report without a valid reporter MAC")
                    continue
                raw = body
            bodies.append(raw)
        if not bodies:
            return 0
        now = self.clock.time()
        accepted: list[list[Served]] = []
        metas: list[tuple[str, float, int, int]] = []
        told: list[tuple[tuple[str, float, int, int], list[Served]]] = []
        capped = 0
        for body, res in zip(bodies, _impl.parse(bodies, self._limits), strict=True):
            if len(res) == 2:
                reason, message = res
                self._drop(reason, "bad demand report on %s: %s", self.channel, message)
                continue
            app, seq, ts, interval_ms, total, groups, n_capped = res
            if not now - self.max_age <= ts <= now + self.max_age:
                self._drop("stale", "demand report of app %r: ts %.3f, now %.3f", app[:64], ts, now)
                continue
            reason = self._admit(app, seq, total)
            if reason is not None:
                self._drop(reason, "demand report of app %r: %s", app[:64], reason)
                continue
            if n_capped:
                capped += n_capped
                self._log.warning(
                    "demand:capped",
                    "demand report of app %r: %d counts above the cap (%d ms interval)",
                    app[:64],
                    n_capped,
                    interval_ms,
                )
            accepted.append(groups)
            metas.append((app, ts, interval_ms, len(body)))
        if capped:
            self.metrics.demand_ignored.labels(reason="capped").inc(capped)
        queued = 0
        with self._lock:
            for meta, groups in zip(metas, accepted, strict=True):
                n = sum(len(g[1]) for g in groups)
                if self._pending + n <= self.max_pending:
                    self._queue.extend(groups)
                    self._pending += n
                    queued += 1
                    if self.on_report is not None:
                        told.append((meta, groups))
            pending = self._pending
        if queued:
            self.metrics.demand_reports.inc(queued)
        for _ in range(len(accepted) - queued):  # load shed until the loop catches up
            self._drop("overflow", "demand intake full (%d entries pending)", pending)
        if self.on_report is not None:  # per report, never per entry (2,500 apps: 1 M/s)
            for (app, ts, interval_ms, size), groups in told:
                self.on_report(app, ts, interval_ms, groups, size)
        return queued

    def _admit(self, name: str, seq: int, total: int) -> str | None:
        """The app's seq window and budgets; a drop reason, or None when admitted."""
        mono = self.clock.monotonic()
        app = self._apps.get(name)
        if app is None:
            app = _App(seq - 1, reads=self.app_budget, reports=self.report_rate, at=mono)
            self._apps[name] = app
            while len(self._apps) > self.max_apps:
                self._apps.popitem(last=False)
        else:
            self._apps.move_to_end(name)
            dt = max(0.0, mono - app.at)
            app.at = mono
            app.reads = min(self.app_budget, app.reads + dt * self.app_budget)
            app.reports = min(self.report_rate, app.reports + dt * self.report_rate)
        if not app.fresh_seq(seq):
            return "duplicate"
        if app.reports < 1.0:
            return "rate_limited"
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
                self.connected, self.error = True, None
                self.connects += 1
                self._backoff.reset()
                if not self._read_raw(pubsub):
                    self._read_messages(pubsub)
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

    def _read_raw(self, pubsub: Any) -> bool:
        """Read the subscription's socket with a hiredis reader of our own.

        redis-py hands over one message per call, at ~140 us each for a 5 KB report
        (it formats every message for a debug log line), which caps the intake near
        7,000 reports/s. Here one ``recv`` takes all the socket holds (up to 1 MiB),
        the reader splits it, and every message read goes to the parser in one batch.
        The connection was made (AUTH, TLS, SELECT) and subscribed by redis-py; False
        when it is not a plain connection with a socket (the caller reads it instead).
        """
        conn = getattr(pubsub, "connection", None)
        sock = getattr(conn, "_sock", None)
        if hiredis is None or sock is None:
            return False
        reader = hiredis.Reader()
        # close() shuts the socket down to end a wait, so an idle intake wakes every
        # few seconds, not four times a second; the timeout is a safety net.
        sock.settimeout(_RAW_WAKE)
        self._sock = sock
        if self._stop.is_set():  # close() came before the socket was published
            return True
        kinds = (b"message", b"smessage")  # RESP3 pushes are a list subclass
        # One buffer for every recv: a fresh 1 MiB bytes per recv, cut to what came,
        # left the allocator fragmented under a flood of 1 MiB reports (RSS +72 MiB in
        # 3 s on a loaded CI machine; 31-41 MiB on an idle one).
        buf = bytearray(_RAW_RECV)
        while not self._stop.is_set():
            try:
                n = sock.recv_into(buf)
            except TimeoutError:  # socket.timeout
                continue
            if not n:
                if self._stop.is_set():  # our own close()
                    return True
                raise redis.ConnectionError("Connection closed by server.")
            reader.feed(cast(bytes, buf), 0, n)  # any buffer; the stubs name bytes
            batch: list[Any] = []
            while True:
                try:
                    reply = reader.gets()
                except hiredis.ProtocolError as exc:
                    raise redis.ConnectionError(f"protocol error: {exc}") from exc
                if reply is False:
                    break
                if isinstance(reply, list) and len(reply) == 3 and reply[0] in kinds:
                    batch.append(reply[2])
                    if len(batch) >= self.read_batch:
                        self.feed_many(batch)
                        batch = []
            if batch:
                self.feed_many(batch)
        return True

    def _read_messages(self, pubsub: Any) -> None:
        """Read through redis-py (cluster pub/sub): still one parser call per wake-up."""
        get = getattr(pubsub, "get_sharded_message", None) if self.sharded else None
        get = get or pubsub.get_message
        while not self._stop.is_set():
            msg = get(timeout=0.25)
            batch: list[Any] = []
            while msg is not None:
                if msg.get("type") in ("message", "smessage"):
                    batch.append(msg.get("data"))
                    if len(batch) >= self.read_batch:
                        break
                msg = get(timeout=0.0)
            if batch:
                self.feed_many(batch)

    def _lost(self) -> None:
        self.lost_subscription = self.clock.monotonic()
        self.metrics.demand_dropped.labels(reason="subscription_lost").inc()
