"""The Redis MONITOR tap: key accesses straight from the servers, no app changes.

One reader thread per tapped server (a cluster seed URL expands to its primaries)
reads the raw MONITOR stream in large chunks and hands each chunk to the C parser
(GIL released), which extracts keys with the server's own command table. The keys
are counted per db (all accesses, and writes apart) into the tap's pending counters,
which :meth:`MonitorSource.next_batch` swaps out as one :class:`Batch` per server and
db. Aggregating before the detector keeps its work per distinct key, not per access.

Protecting Redis matters more than completeness: MONITOR output is buffered by the
server without bound unless ``client-output-buffer-limit`` says otherwise, so the tap
disconnects (and reconnects after a short pause) when it falls behind: its output
buffer on the server (``CLIENT LIST ID`` omem, polled on a second connection) grows
past ``max_backlog_bytes``, the line timestamps lag local time by more than
``max_lag`` seconds beyond the connection's baseline, or more than
``max_pending_bytes`` of MONITOR output was read since the detector last drained (it
is not keeping up; this also bounds the pending counters' memory). Each is counted in ``hotkeyd_monitor_disconnects_total{reason="backlog"}``.

Duty cycling (``duty < 1``) listens ``duty`` seconds of every second (MONITOR, then
RESET) and scales counts back up. Windows start on a fixed 1 s grid; each window's
counts carry ``Batch.scale = (time since the previous window started) / (window
length)``, which is ``1 / duty`` when the schedule keeps up and grows when a loaded
machine stretches a cycle, so the estimate stays unbiased either way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace

from hotkeyd.batch import Batch
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.errors import ConfigError, MonitorError
from hotkeyd.metrics import Metrics
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sources.monitor.conn import (
    MonitorTarget,
    RespConnection,
    RespError,
    Unreachable,
    authenticate,
    is_perm,
    not_ready,
    parse_cluster_nodes,
    parse_monitor_url,
    perm_error,
    unreachable,
)
from hotkeyd.sources.monitor.tap import Tap, TapConfig, TapShared

__all__ = ["MonitorSource", "parse_monitor_url"]

logger = logging.getLogger(__name__)


class MonitorSource:
    """Taps one or more Redis servers with MONITOR (implements ``Source``).

    Args:
        urls: ``redis-monitor://[user:pass@]host:port`` (``redis-monitor+tls://`` for
            TLS; ``?cluster=auto|yes|no``). A cluster node expands to all primaries.
        duty: fraction of each second spent listening, in (0, 1].
        metrics: where counters go.
        clock: time source (monotonic for windows, time for lag).
        max_backlog_bytes: disconnect when the tap's output buffer on the server
            exceeds this (0 disables the CLIENT LIST poll).
        connect_timeout: seconds for connect and each command at connect.
        max_lag: disconnect when lines arrive this many seconds later than at best.
        max_pending_bytes: MONITOR bytes read since the last ``next_batch`` above
            which the tap counts as behind (bounds memory too).
        count_script_calls: count the commands scripts run (``[db lua]`` lines) as
            well as the EVAL/FCALL keys; off by default to avoid double counting.
        cluster_refresh: seconds between re-reads of CLUSTER NODES for cluster seeds
            (new primaries after a failover or resharding get a tap, demoted or
            removed nodes lose theirs); 0 disables.
    """

    name = "monitor"
    reports_idle = False

    def __init__(
        self,
        urls: Sequence[str],
        *,
        duty: float = 1.0,
        metrics: Metrics,
        clock: Clock | None = None,
        max_backlog_bytes: int = 64 << 20,
        connect_timeout: float = 5.0,
        max_lag: float = 10.0,
        max_pending_bytes: int = 256 << 20,
        read_size: int = 1 << 20,
        max_line: int = 16 << 20,
        poll_interval: float = 0.5,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        count_script_calls: bool = False,
        cluster_refresh: float = 30.0,
    ) -> None:
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise ConfigError("the MONITOR source needs at least one redis-monitor:// URL")
        if not 0 < duty <= 1:
            raise ConfigError(f"monitor duty must be in (0, 1], got {duty}")
        if (
            max_pending_bytes < read_size
            or read_size < 4096
            or max_backlog_bytes < 0
            or max_lag <= 0
        ):
            raise ConfigError(
                "monitor: read_size >= 4096, max_pending_bytes >= read_size, max_lag > 0 required"
            )
        self.targets = [parse_monitor_url(u) for u in urls]
        self.duty = float(duty)
        self.metrics = metrics
        self.clock: Clock = clock or SystemClock()
        self.config = TapConfig(
            duty=self.duty,
            connect_timeout=connect_timeout,
            max_backlog_bytes=max_backlog_bytes,
            max_lag=max_lag,
            max_pending_bytes=max_pending_bytes,
            read_size=read_size,
            max_line=max_line,
            poll_interval=poll_interval,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            count_script_calls=count_script_calls,
        )
        self.stop_event = threading.Event()
        self.ratelog = RateLimitedLog(logger, 10.0)
        self.cond = threading.Condition()
        self.shared = TapShared(metrics, self.clock, self.ratelog, self.cond, self.late_discover)
        self.taps: list[Tap] = []
        self.cluster_refresh = cluster_refresh
        self._clusters: list[MonitorTarget] = []  # seeds that turned out to be clusters
        self._orphans: list[Batch] = []  # counts of taps removed since the last drain
        self._refresher: threading.Thread | None = None
        self._started = False

    @property
    def exhausted(self) -> bool:
        return False

    @property
    def error(self) -> None:
        """Never set: taps retry every failure after start."""
        return None

    @property
    def connected(self) -> bool:
        """False while a server that was down at start has not been reached since.

        A tap that lost a connection it had reconnects within its backoff (and a
        duty cycle may reconnect on purpose), so only never-reached servers count.
        """
        with self.cond:
            return not any(t.failed_at_start and not t.ever_connected for t in self.taps)

    @property
    def unhealthy(self) -> None:
        """Never stuck in a way a restart would fix."""
        return None

    def idle_watermark(self) -> None:
        """No event-time watermark: batches are stamped as they are read."""
        return None

    def _discover(self, target: MonitorTarget) -> list[MonitorTarget]:
        """A cluster seed -> its primaries; a standalone server -> itself."""
        nodes = self._ask_nodes(target)
        if nodes is None:
            return [target]
        self._clusters.append(target)
        logger.info("%s is a cluster: tapping %d primaries", target.display, len(nodes))
        return nodes

    def _ask_nodes(self, target: MonitorTarget) -> list[MonitorTarget] | None:
        """Primaries from CLUSTER NODES, or None when ``target`` is to be tapped alone."""
        if target.cluster == "no":
            return None
        try:
            conn = RespConnection(target.redis, self.config.connect_timeout)
        except OSError as exc:
            raise unreachable(target, exc) from exc
        try:
            authenticate(conn, target)
            try:
                text = conn.call("CLUSTER", "NODES")
            except RespError as exc:
                if "disabled" in str(exc) and target.cluster == "auto":
                    return None
                if not_ready(exc):
                    raise Unreachable(f"{target.display} is not ready: {exc}") from None
                if is_perm(exc) and target.cluster == "auto":
                    logger.warning(
                        "%s: no permission for CLUSTER NODES; tapping this node only",
                        target.display,
                    )
                    return None
                if is_perm(exc):
                    raise perm_error(target, "cluster|nodes", exc) from None
                raise MonitorError(f"{target.display} is not a cluster node: {exc}") from None
        except OSError as exc:
            raise unreachable(target, exc) from exc
        finally:
            conn.close()
        nodes = parse_cluster_nodes(text, target.redis.host)
        if not nodes:
            raise MonitorError(f"{target.display}: CLUSTER NODES lists no reachable primary")
        return [target.with_node(h, p) for h, p in nodes]

    def start(self) -> None:
        """Discover nodes, connect each tap (failing fast on configuration) and start readers.

        A server that cannot be reached (refused, timeout, DNS, still loading) does not
        fail the start: it is logged and counted (``monitor_disconnects{reason=
        "unreachable"}``, ``source_errors{kind="connection"}``) and its tap keeps
        retrying in the background while the others run, as after a restart.

        Raises:
            MonitorPermissionError: the user may not run a command the tap needs.
            MonitorError: a wrong password, a TLS verification failure, or a server
                that refuses the tap: things retrying cannot fix.
        """
        if self._started:
            return
        nodes: list[tuple[MonitorTarget, MonitorTarget | None, bool]] = []
        for t in self.targets:
            try:
                found = self._discover(t)
            except Unreachable as exc:  # cluster or not is asked on first contact
                self._unreachable_at_start(t, exc)
                nodes.append((t, None, True))
                continue
            seed = t if self._clusters and self._clusters[-1] is t else None
            nodes.extend((n, seed, False) for n in found)
        seen = set()
        taps = []
        try:
            for n, seed, down in nodes:
                key = (n.redis.host, n.redis.port)
                if key in seen:
                    continue
                seen.add(key)
                tap = self._tap(n, seed)
                taps.append(tap)
                tap.discover = down and n.cluster != "no"
                tap.failed_at_start = down
                if down:
                    continue
                try:
                    try:
                        tap.connect()
                    except OSError as exc:
                        raise unreachable(n, exc) from exc
                except Unreachable as exc:
                    tap.close_conns()
                    tap.failed_at_start = True
                    self._unreachable_at_start(n, exc)
        except BaseException:
            for tap in taps:
                tap.close_conns()
            raise
        with self.cond:
            self.taps = taps
        self._started = True
        for tap in taps:
            self._spawn(tap)
        self._ensure_refresher()

    def _unreachable_at_start(self, target: MonitorTarget, exc: Exception) -> None:
        """Log (one line per server, rate-limited) and count a server down at start."""
        self.metrics.source_errors.labels(source=self.name, kind="connection").inc()
        self.metrics.monitor_disconnects.labels(reason="unreachable").inc()
        self.ratelog.warning(
            f"conn:{target.display}",
            "MONITOR at start: %s; retrying it in the background",
            exc,
        )

    def late_discover(self, tap: Tap) -> None:
        """First contact with a seed that was down at start: is it a cluster node?

        Called from the tap's own thread before it connects. On a cluster the seed's
        primaries get taps (this one stays only if the seed is a primary itself).

        Raises:
            Unreachable: still down (the tap retries with backoff).
        """
        nodes = self._ask_nodes(tap.target)
        tap.discover = False
        if nodes is None:
            return
        seed = tap.target
        with self.cond:
            tap.seed = seed
            self._clusters.append(seed)
        logger.info("%s is a cluster: tapping %d primaries", seed.display, len(nodes))
        self._apply_topology(seed, nodes)
        self._ensure_refresher()

    def _ensure_refresher(self) -> None:
        """Start the topology refresher once there is a cluster seed to follow."""
        with self.cond:
            if (
                self._refresher is not None
                or not self._clusters
                or self.cluster_refresh <= 0
                or self.stop_event.is_set()
            ):
                return
            self._refresher = threading.Thread(
                target=self._refresh_loop, name="hotkeyd-monitor-cluster", daemon=True
            )
            self._refresher.start()

    def _tap(self, target: MonitorTarget, seed: MonitorTarget | None) -> Tap:
        return Tap(self.config, self.shared, target, seed=seed)

    @staticmethod
    def _spawn(tap: Tap) -> None:
        tap.thread = threading.Thread(
            target=tap.run, name=f"hotkeyd-monitor-{tap.target.display}", daemon=True
        )
        tap.thread.start()

    def _refresh_loop(self) -> None:
        """Follow cluster topology changes (failover, new primaries) every few seconds."""
        while not self.stop_event.wait(self.cluster_refresh):
            try:
                self.refresh_topology()
            except Exception as exc:  # never let the refresher die; retry next time
                self.ratelog.warning(
                    "topology", "MONITOR: cannot refresh the cluster topology: %s", exc
                )

    def refresh_topology(self) -> None:
        """Re-read CLUSTER NODES (from any known node) and add or remove taps to match."""
        for seed in list(self._clusters):
            with self.cond:
                known = [t.target for t in self.taps if t.seed is seed]
            nodes = None
            for candidate in [seed, *known]:
                try:
                    nodes = self._ask_nodes(replace(candidate, cluster="yes"))
                    break
                except MonitorError:
                    continue
            if nodes is None:
                continue  # nobody answered: keep this cluster's taps as they are
            self._apply_topology(seed, nodes)

    def _apply_topology(self, seed: MonitorTarget, nodes: list[MonitorTarget]) -> None:
        """Give ``seed``'s primaries ``nodes`` a tap each and untap the rest of its taps."""
        wanted = {(n.redis.host, n.redis.port): n for n in nodes}
        with self.cond:
            if self.stop_event.is_set():
                return
            keep, gone = [], []
            for tap in self.taps:
                key = (tap.target.redis.host, tap.target.redis.port)
                if tap.seed is not seed or wanted.pop(key, None) is not None:
                    keep.append(tap)
                else:
                    gone.append(tap)
                    self._orphans.extend(tap.drain())
            tapped = {(t.target.redis.host, t.target.redis.port) for t in keep}
            new = [self._tap(t, seed) for k, t in wanted.items() if k not in tapped]
            self.taps = keep + new
        for tap in gone:
            logger.info("MONITOR: %s is no longer a primary; untapping it", tap.target.display)
            tap.stop_event.set()
            tap.close_conns()
        for tap in new:
            logger.info("MONITOR: new cluster primary %s; tapping it", tap.target.display)
            self._spawn(tap)

    def next_batch(self, max_wait: float) -> list[Batch]:
        """Counts collected since the last call (one batch per server and db).

        Waits at most ``max_wait`` seconds for the first access to arrive.
        """
        with self.cond:
            if not self._orphans and not any(t.acc for t in self.taps) and max_wait > 0:
                self.cond.wait(max_wait)
            out, self._orphans = self._orphans, []
            for tap in self.taps:
                if tap.acc:
                    out.extend(tap.drain())
                else:
                    tap.acc_bytes = 0
            return out

    def commit(self) -> None:
        """Nothing to acknowledge: MONITOR has no offsets."""

    def close(self) -> None:
        """Stop the readers and close every connection. Idempotent."""
        self.stop_event.set()
        with self.cond:
            taps, self.taps = self.taps, []
        for tap in taps:
            tap.stop_event.set()
            tap.close_conns()
        for tap in taps:
            if tap.thread is not None and tap.thread is not threading.current_thread():
                tap.thread.join(timeout=5.0)
        if self._refresher is not None and self._refresher is not threading.current_thread():
            self._refresher.join(timeout=5.0)
