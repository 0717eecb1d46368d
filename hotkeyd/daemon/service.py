"""The daemon: wires sources -> detector -> publisher, and owns the lifecycle.

One thread runs the loop: it asks each source for batches (never waiting past the
next tick), feeds them to the detector, acknowledges them upstream (Kafka offsets are
committed only after the batch is in the sketch: at-least-once), and evaluates a tick
when one is due. Publishing never blocks that loop: the publisher hands network I/O
to its own thread, so a Redis outage slows nothing and loses no state (the full hot
set is republished on reconnect).

Shutdown (SIGTERM/SIGINT, or :meth:`Service.request_stop`): intake stops, one final
tick is evaluated, a ``final: true`` message with the current hot set is published,
and publishers flush within ``shutdown_timeout``. Subscribers should keep the listed
keys hot until their ``ttl_ms`` runs out: another instance may take over.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.factory import (
    make_auth,
    make_demand_intake,
    make_history,
    make_namespace,
    make_publisher,
    make_sources,
    make_watch,
)
from hotkeyd.daemon.signals import SignalLatch
from hotkeyd.detector import Detector, RateEntry
from hotkeyd.detector.rules import RuleSet, load_rules
from hotkeyd.errors import ConfigError, PublishError, UnreachableError
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import HotEntry, encode_key
from hotkeyd.publish import Publisher, RedisPublisher, default_instance_id
from hotkeyd.sources.base import Source
from hotkeyd.sources.demand import DemandIntake

__all__ = ["Service", "ServiceState"]

logger = logging.getLogger(__name__)


@dataclass
class ServiceState:
    """What /healthz and ``hotkeyd check`` look at."""

    started: float = 0.0
    last_tick: float = 0.0
    running: bool = False
    stopping: bool = False
    reasons: list[str] = field(default_factory=list)


class Service:
    """The hotkeyd daemon as a library object.

    Args:
        settings: validated settings.
        clock: time source (a ManualClock in tests).
        metrics: metrics registry holder; a fresh one by default.
        sources: override the sources built from ``settings.sources``.
        publisher: override the publisher built from ``settings.redis_url``.
        stdout: stream for the stdout publisher when there is no Redis URL.
        rules: the rules to start with, instead of loading ``settings.rules`` (SIGHUP
            still reloads from ``settings.rules`` when it is set).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        sources: list[Source] | None = None,
        publisher: Publisher | None = None,
        stdout: IO[str] | None = None,
        rules: RuleSet | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.instance = settings.instance or default_instance_id()
        self.namespace = make_namespace(settings)
        if rules is None:
            rules = load_rules(settings.rules) if settings.rules else RuleSet.default()
        self.rules: RuleSet = rules
        self.detector = Detector(
            settings.detector,
            self.rules,
            self.clock,
            metrics=self.metrics,
        )
        self.sources = (
            sources
            if sources is not None
            else make_sources(settings, metrics=self.metrics, clock=self.clock)
        )
        ns, inst, m, c = self.namespace, self.instance, self.metrics, self.clock
        self.publisher: Publisher = (
            publisher
            if publisher is not None
            else make_publisher(
                settings, namespace=ns, instance=inst, metrics=m, clock=c, stdout=stdout
            )
        )
        self.demand: DemandIntake | None = make_demand_intake(
            settings, namespace=ns, instance=inst, metrics=m, clock=c
        )
        self.watch: Any = make_watch(settings, namespace=ns, instance=inst, metrics=m)
        self._lane_names = _lane_names(self.sources)
        self._event_counters: dict[str, Any] = {}  # source name -> its events counter
        self.history = make_history(settings, namespace=ns, instance=inst, metrics=m, clock=c)
        self.state = ServiceState()
        # What other threads (HTTP, demo view) read: replaced whole at each tick, never
        # mutated, so readers never touch the detector's structures mid-update.
        self.view: tuple[list[HotEntry], list[dict[str, Any]]] = ([], [])
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._http: Any = None
        self.console_memory: Any = None  # hotkeyd.web.KeyMemory with the console on
        self.metrics.add_gauge_callback(
            "hotkeyd_sketch_memory_bytes",
            "Bytes held by the detector's sketches.",
            lambda: float(self.detector.nbytes),
        )

    # -- control (safe from signal handlers and other threads) --------------------------
    def request_stop(self) -> None:
        """Begin a graceful shutdown; :meth:`run` returns soon after."""
        self._stop.set()

    def request_reload(self) -> None:
        """Reload the rules file at the next loop turn (SIGHUP)."""
        self._reload.set()

    def reload_rules(self) -> bool:
        """Load and swap the rules now. A bad file is logged and the old rules stay."""
        if not self.settings.rules:
            logger.info("no rules file configured; nothing to reload")
            return False
        try:
            rules = load_rules(self.settings.rules)
        except Exception as exc:  # RulesError, or anything a hostile file provokes
            logger.error("rules reload rejected, old rules stay in force: %s", exc)
            self.metrics.rule_reloads.labels(result="rejected").inc()
            return False
        self.detector.set_rules(rules)
        self.rules = rules
        self.metrics.rule_reloads.labels(result="ok").inc()
        logger.info("rules reloaded from %s (%d rules)", self.settings.rules, len(rules))
        return True

    # -- views ---------------------------------------------------------------------------
    def health(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, details) for /healthz.

        Unhealthy (HTTP 503) means the loop is not running or has stopped ticking:
        restarting helps. An unreachable Redis or source makes the daemon *degraded*
        (HTTP 200, ``"status": "degraded"`` with reasons): it keeps detecting and
        retries on its own, and a restart would not fix the dependency.
        """
        now = self.clock.monotonic()
        reasons: list[str] = []
        degraded: list[str] = []
        if not self.state.running:
            reasons.append("not running")
        elif now - self.state.last_tick > max(5 * self.settings.tick, 2.0):
            reasons.append(f"no tick for {now - self.state.last_tick:.1f}s")
        if not self.publisher.healthy:
            degraded.append(f"publisher: {self.publisher.last_error or 'unhealthy'}")
        for src in self.sources:
            stuck = src.unhealthy
            if stuck:
                reasons.append(f"source {src.name}: {stuck}")
            if not src.connected:
                degraded.append(f"source {src.name}: not connected")
            err = src.error
            if err is not None:
                degraded.append(f"source {src.name}: {err}")
        if self.watch is not None:
            degraded += self.watch.problems()
        demand_problem = self.demand.problem() if self.demand is not None else None
        if demand_problem is not None:
            degraded.append(f"demand reports: {demand_problem}")
        lags = self.detector.lags()
        for lane, lag in sorted(lags.items()):
            if lag > self.settings.lag_alert:
                degraded.append(
                    f"source {lane}: {lag:.1f}s behind (lag alert {self.settings.lag_alert:g}s)"
                )
        status = "unhealthy" if reasons else ("degraded" if degraded else "ok")
        return not reasons, {
            "status": status,
            "instance": self.instance,
            "reasons": reasons + degraded,
            "hot_keys": len(self.view[0]),
            "lag_seconds": {lane: round(lag, 3) for lane, lag in sorted(lags.items())},
        }

    def topk_json(self, n: int | None = None) -> dict[str, Any]:
        """The hot set and the top keys by rate, as /topk serves them."""
        hot, top = self.view
        return {
            "instance": self.instance,
            "ts": self.clock.time(),
            "hot": [h.to_json() for h in hot],
            "top": top if n is None else top[:n],
        }

    # -- the loop ------------------------------------------------------------------------
    def start(self) -> None:
        """Start publisher, sources and the HTTP endpoint (run() calls this).

        Raises:
            ConfigError: Redis rejects the credentials or ACL (retrying cannot help).
            HotkeydError: a source cannot start (bad file, MONITOR permission, ...).
        """
        if self.settings.redis_url and isinstance(self.publisher, RedisPublisher):
            self._check_redis(self.settings.redis_url)
        self.publisher.start()
        if self.history is not None:
            self.history.start()
        for src in self.sources:
            src.start()
        if self.demand is not None:
            self.demand.start()
        if self.watch is not None:
            self.watch.start()
        if self.settings.http_port is not None:
            from hotkeyd.daemon.http import HttpServer

            self._http = HttpServer(
                self.metrics.registry,
                host=self.settings.http_host,
                port=self.settings.http_port,
                health=self.health,
                topk=self.topk_json,
                console=self._make_console(),
            )
            self._http.start()
            logger.info("HTTP endpoint on http://%s:%d", self.settings.http_host, self._http.port)
        self.state.running = True
        self.state.started = self.state.last_tick = self.clock.monotonic()
        logger.info(
            "hotkeyd %s started: %d source(s), publisher %s",
            self.instance,
            len(self.sources),
            type(self.publisher).__name__,
        )

    def _make_console(self) -> Any:
        """The web console over this service's views (None with ``--no-console``)."""
        if not self.settings.console:
            return None
        from hotkeyd.web.wiring import console_for

        console = console_for(self, auth=make_auth(self.settings))  # verifies snapshots
        self.console_memory = console.src.memory
        return console

    def sources_state(self) -> dict[str, Any]:
        """Each source's, the publisher's and the demand intake's state (console Health)."""
        out: dict[str, Any] = {}
        for lane, src in zip(self._lane_names, self.sources, strict=True):
            err = src.error
            out[f"source {lane}"] = (
                f"error: {err}"
                if err is not None
                else (
                    src.unhealthy
                    or (
                        "exhausted"
                        if src.exhausted
                        else "connected"
                        if src.connected
                        else "not connected"
                    )
                )
            )
        pub = self.publisher
        out[f"publisher {type(pub).__name__}"] = (
            "healthy" if pub.healthy else f"unhealthy: {pub.last_error or '?'}"
        ) + (f", {pub.unsent} unsent" if pub.unsent else "")
        if self.demand is not None:
            d = self.demand
            out["demand intake"] = (
                f"subscribed to {d.channel}" if d.connected else f"not connected: {d.error or '?'}"
            )
        else:
            out["demand intake"] = "off (needs --redis-url and --demand-reports)"
        out["history stream"] = (
            self.namespace.history if self.history is not None else "off (needs --redis-url)"
        )
        return out

    def _check_redis(self, url: str) -> None:
        """Fail fast on wrong credentials; ride out an unreachable Redis."""
        from hotkeyd.conn.redis import check_redis

        try:
            check_redis(url, timeout=3.0)
        except UnreachableError as exc:
            logger.warning("%s; detecting anyway, publishing will retry with backoff", exc)
        except PublishError as exc:  # auth / ACL: an operator must fix the settings
            raise ConfigError(str(exc)) from exc

    @property
    def http_port(self) -> int | None:
        return None if self._http is None else int(self._http.port)

    def run(self, *, on_started: Callable[[], None] | None = None) -> int:
        """Run until stopped or every source is exhausted; returns the exit code."""
        try:
            self.start()
        except BaseException:
            self._abort_start()
            raise
        if on_started is not None:
            on_started()
        try:
            while not self._stop.is_set():
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload_rules()
                det = self.detector
                got = self._poll_sources(max(0.0, min(det.due(), det.crossing_in(), 0.25)))
                self._ingest_demand()
                if self.detector.due() <= 0:
                    self._tick()
                else:
                    self._crossing()
                if not got and self.sources and all(s.exhausted for s in self.sources):
                    break  # finite input is over
            self._final_tick()
        finally:
            self._shutdown()
        return self._exit_code()

    def _exit_code(self) -> int:
        """0 after a clean run; 1 when input was lost (a source failed, messages unsent)."""
        code = 0
        for src in self.sources:
            err = src.error
            if err is not None:
                logger.error("source %s failed: %s", src.name, err)
                code = 1
        unsent = self.publisher.unsent
        if unsent:
            logger.error("%d notification(s) could not be published before exit", unsent)
            code = 1
        return code

    def _poll_sources(self, max_wait: float) -> int:
        live = [s for s in self.sources if not s.exhausted]
        if not live:
            if max_wait > 0:
                self._stop.wait(max_wait)
            return 0
        got = 0
        share = max_wait / len(live)
        counters = self._event_counters
        for src in live:
            lane = self._lane_names[self.sources.index(src)]
            batches = src.next_batch(share)
            for batch in batches:
                result = self.detector.ingest(batch, lane=lane, hinted=src.reports_idle)
                got += 1
                name = batch.source or src.name
                counter = counters.get(name)
                if counter is None:  # labels() costs more than the rest of a small batch
                    counter = counters[name] = self.metrics.events.labels(source=name)
                counter.inc(result.events)
            if batches:
                src.commit()
            wm = src.idle_watermark()
            if wm is not None:
                self.detector.advance(lane, wm)
        return got

    def _ingest_demand(self) -> None:
        """Add what app caches served locally (drained without waiting) to the windows."""
        if self.demand is None:
            return
        # Everything queued, in bounded steps, until the next tick is due: a fleet's
        # reports arrive faster than one step per loop pass (the queue would overflow).
        while True:
            items = self.demand.drain()
            for db, keys, counts in items:
                added, ignored = self.detector.ingest_served(keys, counts, db)
                self.demand.counted(added, ignored)
            if not items or self.detector.due() <= 0:
                return

    def _crossing(self) -> None:
        """Announce keys that crossed their threshold since the last close, in this pass."""
        checked = self.clock.monotonic()
        window_opened = checked + self.detector.due() - self.settings.tick
        res = self.detector.crossing()
        if res is None:
            return
        if self.history is not None and res.transitions:
            self.history.record(res.transitions, max(0, round((res.ts - res.as_of) * 1000)))
        self.publisher.publish(list(res.hot), [], [])
        handed = self.clock.monotonic()
        for _ in res.hot:
            self.metrics.detection_latency.observe(max(0.0, handed - window_opened))
            self.metrics.publish_latency.observe(max(0.0, handed - checked))

    def _tick(self) -> None:
        due_at = self.clock.monotonic()
        late = max(0.0, -self.detector.due())
        # The sub-window that just closed opened one tick before it was due: a key that
        # turns hot now crossed its threshold at the earliest then.
        window_opened = due_at - late - self.settings.tick
        res = self.detector.tick()
        self.state.last_tick = self.clock.monotonic()
        if self.history is not None and res.transitions:
            self.history.record(res.transitions, max(0, round((res.ts - res.as_of) * 1000)))
        if res.hot or res.cool or res.still_hot:
            self.publisher.publish(list(res.hot), list(res.still_hot), list(res.cool))
            handed = self.clock.monotonic()
            for _ in res.hot:
                self.metrics.detection_latency.observe(max(0.0, handed - window_opened))
                self.metrics.publish_latency.observe(max(0.0, handed - (due_at - late)))
        hot = self.detector.hot()
        now = self.clock.time()
        self.metrics.longest_hot.set(max((now - h.since for h in hot if h.since), default=0.0))
        rates = self.detector.top()
        if self.console_memory is not None:
            self.console_memory.record(now, rates, res.transitions, hot)
        top = [_rate_json(r) for r in rates]
        self.view = (hot, top)
        self.publisher.update_state(hot, top)
        if self.watch is not None:  # after the publish: arming never delays an announcement
            # the seq of the message just built: strict-mode apps wait for armed >= it
            self.watch.set_hot((h.key for h in hot), seq=getattr(self.publisher, "seq", 0))

    def _final_tick(self) -> None:
        """Input over or stop requested: close the open sub-window so its counts are rated.

        Waits for the sub-window's end (at most one tick), even when a stop is pending:
        the final message must include what the last sub-window saw.
        """
        wait = min(self.detector.due(), self.settings.tick)
        if wait > 0:
            time.sleep(wait)
        self._tick()

    def _abort_start(self) -> None:
        """Start failed half-way: release what did start, announce nothing.

        Without this a publisher thread would keep the instance's snapshot and
        heartbeat alive (clients would see a dead daemon as live) and started sources
        (a Kafka consumer in its group) would keep their resources.
        """
        for src in self.sources:
            try:
                src.close()
            except Exception as exc:
                logger.debug("closing source %s after a failed start: %s", src.name, exc)
        if self.demand is not None:
            self.demand.close()
        if self.watch is not None:
            self.watch.close(timeout=1.0)
        if self.history is not None:
            self.history.close(timeout=1.0)
        try:
            self.publisher.close(timeout=1.0)
        finally:
            if self._http is not None:
                self._http.close()
                self._http = None

    def _shutdown(self) -> None:
        self.state.stopping = True
        for src in self.sources:
            try:
                src.close()
            except Exception as exc:  # closing must go on for the others
                logger.warning("closing source %s failed: %s", src.name, exc)
        if self.demand is not None:
            self.demand.close()
        if self.watch is not None:
            self.watch.close()
        hot: list[HotEntry] = self.detector.hot()
        try:
            self.publisher.publish([], hot, [], final=True)
            if self.history is not None:
                self.history.record(self.detector.stop_transitions())
                self.history.close(timeout=self.settings.shutdown_timeout)
            self.publisher.close(timeout=self.settings.shutdown_timeout)
        finally:
            if self._http is not None:
                self._http.close()
            self.state.running = False
        logger.info("hotkeyd %s stopped (%d keys were hot)", self.instance, len(hot))


def _lane_names(sources: list[Source]) -> list[str]:
    """One lane name per source: its name, with ``#2``, ``#3`` ... for repeats of a kind."""
    seen: dict[str, int] = {}
    out = []
    for src in sources:
        n = seen[src.name] = seen.get(src.name, 0) + 1
        out.append(src.name if n == 1 else f"{src.name}#{n}")
    return out


def _rate_json(r: RateEntry) -> dict[str, Any]:
    out: dict[str, Any] = encode_key(r.key)
    out.update(rate=round(r.rate, 3), rule=r.rule, hot=r.hot)
    if r.since:
        out["since"] = round(r.since, 3)
    if r.db:
        out["db"] = r.db
    if r.kind is not None:
        out["kind"] = r.kind
    if r.local:
        out["local"] = round(r.local, 3)
    return out


def run_until_signalled(service: Service, latch: SignalLatch | None = None) -> int:
    """Run ``service`` in this (main) thread with SIGTERM/SIGINT/SIGHUP handlers.

    ``latch``: handlers installed earlier (``hotkeyd run`` installs them before building
    the service); signals it recorded meanwhile are applied now.
    """
    with contextlib.ExitStack() as stack:
        if latch is None:
            latch = stack.enter_context(SignalLatch())
        latch.attach(service)
        started = time.monotonic()
        code = service.run()
        logger.debug("ran for %.1fs", time.monotonic() - started)
        return code
