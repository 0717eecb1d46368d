"""Demand reports: tell the daemon how many reads of its hot keys the app served locally.

Why: a key served from the local cache no longer reaches Redis, so the daemon would see
its rate collapse, cool it, and send the whole load back to Redis (a flap every few
seconds). The caches therefore count every read they serve locally, and this module
reports the counts (wire format: :mod:`hotkeyd.protocol.demand`).

Cost on the read path: one ``item.served += 1`` on the :class:`~hotkeyd.client.hotset.HotItem`
the read already looked up (no lock, no dict write; a racing increment from another
thread may rarely be lost, which only under-reports). Every ``interval`` seconds a
background thread (or asyncio task) walks the hot set, takes the increase of each
counter since its previous report, and PUBLISHes one message per daemon instance on the
app's own Redis connection. A report is bounded (:data:`~hotkeyd.protocol.demand.MAX_ENTRIES`
heaviest entries, :data:`~hotkeyd.protocol.demand.MAX_REPORT_BYTES`); the rest is counted in
``dropped``. A failed PUBLISH is counted (``failed``, ``lost``) and logged at a limited
rate, and its counts are not retried: a report that is late is worth less than none,
and missing demand can only let a key cool (the fail-safe direction).

One :class:`DemandCounter` per :class:`~hotkeyd.client.hotset.HotSet`: caches sharing a
subscriber share the counters, so the first cache that starts reporting owns it and the
others add to the same counters (nothing is reported twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hotkeyd.client.forksafe import track_fork
from hotkeyd.client.hotset import HotItem, HotSet, Ident
from hotkeyd.clock import Clock
from hotkeyd.errors import ClientError
from hotkeyd.protocol.auth import SUFFIX_LEN, MessageAuth
from hotkeyd.protocol.demand import (
    DEFAULT_INTERVAL,
    DEMAND_KEY_ENV,
    DEMAND_KEY_FILE_ENV,
    MAX_ENTRIES,
    MAX_INTERVAL,
    MAX_N,
    MAX_REPORT_BYTES,
    MIN_INTERVAL,
    DemandEntry,
    DemandReport,
)
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = [
    "AsyncDemandReporter",
    "DemandCounter",
    "DemandReporter",
    "DemandStats",
    "reporter_key_from_env",
]

logger = logging.getLogger(__name__)

Outgoing = tuple[str, bytes, int]  # (channel, payload, reads it accounts for)


def reporter_key_from_env(env: Mapping[str, str] | None = None) -> MessageAuth | None:
    """The reporter key of ``HOTKEYD_DEMAND_KEY_FILE`` (a file) or ``HOTKEYD_DEMAND_KEY``."""
    env = os.environ if env is None else env
    path = env.get(DEMAND_KEY_FILE_ENV)
    if path:
        return MessageAuth.from_file(path)
    return MessageAuth.from_env(env, var=DEMAND_KEY_ENV)


@dataclass
class DemandStats:
    """Counters of one app's demand reporting.

    Attributes:
        reports: messages published.
        bytes: bytes published.
        accesses: locally served reads reported.
        failed: messages whose PUBLISH failed (not retried).
        lost: locally served reads in failed messages.
        dropped: reads left out of reports by their bounds (entries beyond the
            heaviest :data:`~hotkeyd.protocol.demand.MAX_ENTRIES` or the byte bound, and the part
            of a count above :data:`~hotkeyd.protocol.demand.MAX_N`).
    """

    reports: int = 0
    bytes: int = 0
    accesses: int = 0
    failed: int = 0
    lost: int = 0
    dropped: int = 0


def check_interval(interval: float) -> float:
    """Validate a report interval (seconds)."""
    if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise ClientError(
            f"report interval must be in [{MIN_INTERVAL}, {MAX_INTERVAL}] s, got {interval!r}"
        )
    return float(interval)


class DemandCounter:
    """The I/O-free half: turns the hot set's ``served`` counters into report messages.

    Args:
        hotset: whose items carry the counters.
        app: this app instance's id (``app`` in the report).
        namespace: channel names.
        clock: ``time()`` stamps the reports.
        interval: report interval (s), sent as ``interval_ms``.
        max_entries: entries per message (the heaviest are kept).
        max_bytes: approximate bound of one message.
        auth: the reporter key that signs every report (never the daemon's signing
            key). By default the key file named by ``HOTKEYD_DEMAND_KEY_FILE`` or the key
            in ``HOTKEYD_DEMAND_KEY``; unsigned when neither is set.
    """

    def __init__(
        self,
        hotset: HotSet,
        app: str,
        namespace: Namespace,
        clock: Clock,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_REPORT_BYTES,
        auth: MessageAuth | None = None,
    ) -> None:
        self.app = app
        self.auth = auth if auth is not None else reporter_key_from_env()
        self.namespace = namespace
        self.clock = clock
        self.interval = check_interval(interval)
        self.max_entries = min(max_entries, MAX_ENTRIES)
        # the signature's suffix must fit under the daemon's cap too
        self.max_bytes = min(max_bytes, MAX_REPORT_BYTES) - (SUFFIX_LEN if self.auth else 0)
        self.stats = DemandStats()
        self._warn = RateLimitedLog(logger)
        self._items = hotset.items
        self._last: dict[Ident, tuple[HotItem, int]] = {}
        self.next_seq = 1  # per app, +1 per message to any instance

    def take(self) -> list[Outgoing]:
        """Collect the increases since the last call and build one message per instance."""
        last = self._last
        fresh: dict[Ident, tuple[HotItem, int]] = {}
        per: dict[str, list[DemandEntry]] = {}
        for key, item in list(self._items.items()):
            served = item.served
            prev = last.get(key)
            base = prev[1] if prev is not None and prev[0] is item else 0
            fresh[key] = (item, served)
            n = served - base
            if n > 0 and item.instance:
                per.setdefault(item.instance, []).append(
                    DemandEntry(item.entry.key, n, item.entry.db)
                )
        self._last = fresh
        return [self.message(inst, entries) for inst, entries in per.items()]

    def rebase(self, app: str) -> None:
        """Start over as app instance ``app`` (a forked child): from the counters as they
        are now, so reads served before the fork are reported by the parent alone."""
        self.app = app
        self.next_seq = 1
        self._last = {key: (item, item.served) for key, item in list(self._items.items())}

    def message(self, instance: str, entries: list[DemandEntry]) -> Outgoing:
        """One bounded report of ``entries`` (reads per key) for daemon ``instance``."""
        for i, e in enumerate(entries):
            if e.n > MAX_N:
                self.stats.dropped += e.n - MAX_N
                entries[i] = DemandEntry(e.key, MAX_N, e.db)
        if len(entries) > self.max_entries:
            entries.sort(key=lambda e: e.n, reverse=True)
            self._drop(entries, self.max_entries)
        report = DemandReport(
            self.app, self.next_seq, self.clock.time(), round(self.interval * 1000), tuple(entries)
        )
        self.next_seq += 1
        payload = report.dumps()
        while len(payload) > self.max_bytes and len(entries) > 1:  # long keys: halve, heaviest kept
            entries.sort(key=lambda e: e.n, reverse=True)
            self._drop(entries, len(entries) // 2)
            report = DemandReport(
                report.app, report.seq, report.ts, report.interval_ms, tuple(entries)
            )
            payload = report.dumps()
        if self.auth is not None:
            payload = self.auth.sign(payload)
        return self.namespace.demand_channel(instance), payload, report.total

    def _drop(self, entries: list[DemandEntry], keep: int) -> None:
        self.stats.dropped += sum(e.n for e in entries[keep:])
        del entries[keep:]

    def sent(self, out: Outgoing) -> None:
        self.stats.reports += 1
        self.stats.bytes += len(out[1])
        self.stats.accesses += out[2]

    def failed(self, out: Outgoing, exc: BaseException | None = None) -> None:
        self.stats.failed += 1
        self.stats.lost += out[2]
        if exc is not None:
            self._warn(logging.WARNING, "demand report not sent: %s", exc)


class DemandReporter:
    """Publishes a :class:`DemandCounter`'s reports from a background thread.

    Args:
        counter: what to report.
        publish: ``publish(channel, payload)`` (e.g. a redis-py client's ``publish``).
    """

    def __init__(self, counter: DemandCounter, publish: Callable[[str, bytes], Any]) -> None:
        self.counter = counter
        self._publish = publish
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one flush at a time (thread vs explicit flush())
        self._thread: threading.Thread | None = None
        track_fork(self)

    @property
    def stats(self) -> DemandStats:
        return self.counter.stats

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hotkeyd-demand", daemon=True)
            self._thread.start()

    def after_fork_in_child(self) -> None:
        """Called in a forked child (gunicorn ``--preload``): the thread stayed in the
        parent, and the child's local reads must be reported by the child, as an app
        instance of its own."""
        running = self._thread is not None and not self._stop.is_set()
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.counter.rebase(f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        if running:
            self.start()

    def flush(self) -> int:
        """Report now; returns the messages sent."""
        with self._lock:
            sent = 0
            for out in self.counter.take():
                try:
                    self._publish(out[0], out[1])
                except Exception as exc:  # any client error: count, log, carry on
                    self.counter.failed(out, exc)
                    continue
                self.counter.sent(out)
                sent += 1
            return sent

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread after one last report."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.counter.interval):
            self.flush()
        self.flush()


class AsyncDemandReporter:
    """Publishes a :class:`DemandCounter`'s reports from an asyncio task.

    Args:
        counter: what to report.
        publish: ``await publish(channel, payload)`` (a ``redis.asyncio`` client's).
    """

    def __init__(
        self, counter: DemandCounter, publish: Callable[[str, bytes], Awaitable[Any]]
    ) -> None:
        self.counter = counter
        self._publish = publish
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def stats(self) -> DemandStats:
        return self.counter.stats

    def start(self) -> None:
        if self._task is None:
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._stopping))

    async def flush(self) -> int:
        """Report now; returns the messages sent."""
        sent = 0
        for out in self.counter.take():
            try:
                await self._publish(out[0], out[1])
            except asyncio.CancelledError:
                self.counter.failed(out)
                raise
            except Exception as exc:
                self.counter.failed(out, exc)
                continue
            self.counter.sent(out)
            sent += 1
        return sent

    async def stop(self) -> None:
        """Cancel the task and send one last report."""
        task, self._task = self._task, None
        if task is not None:
            # The event ends the loop even when the cancel is lost: one landing inside a
            # PUBLISH can be swallowed by the client's read timeout racing it (seen as a
            # close() that never returned), and the task would report forever.
            self._stopping.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.flush()

    async def _run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.counter.interval)
            if stopping.is_set():
                return
            await self.flush()
