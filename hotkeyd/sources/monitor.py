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
import random
import ssl
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.errors import ConfigError, MonitorError, MonitorPermissionError
from hotkeyd.keyspec import table_from_command_reply
from hotkeyd.metrics import Metrics
from hotkeyd.monitor_parser import Parser
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sources.base import Batch
from hotkeyd.sources.monitor_conn import (
    MonitorTarget,
    RespConnection,
    RespError,
    parse_cluster_nodes,
    parse_monitor_url,
)

__all__ = ["MonitorSource", "parse_monitor_url"]

logger = logging.getLogger(__name__)
_SOURCE = "monitor"
_PERIOD = 1.0  # duty-cycle period, seconds


class _Backlog(Exception):
    """The tap fell behind: disconnect before Redis buffers without bound."""


class _Closed(ConnectionError):
    """The server closed the connection (restart, kill, timeout)."""


def _perm_error(target: MonitorTarget, what: str, exc: Exception) -> MonitorPermissionError:
    user = target.redis.username or "default"
    return MonitorPermissionError(
        f"Redis user {user!r} on {target.display} may not run {what.upper().replace('|', ' ')} "
        f"({exc}); grant it with: ACL SETUSER {user} +{what.lower()}"
    )


def _unreachable(target: MonitorTarget, exc: OSError) -> MonitorError:
    if isinstance(exc, ssl.SSLError):
        return MonitorError(f"TLS handshake with {target.display} failed: {exc}")
    return MonitorError(f"cannot reach {target.display}: {exc}")


def _is_perm(exc: Exception) -> bool:
    return str(exc).startswith("NOPERM")


class _Tap:
    """One server's MONITOR connection and its reader thread."""

    def __init__(self, src: MonitorSource, target: MonitorTarget) -> None:
        self.src = src
        self.target = target
        self.parser = Parser(skip_scripts=not src.count_script_calls, max_line=src.max_line)
        self.conn: RespConnection | None = None
        self.ctl: RespConnection | None = None
        self.client_id: int | None = None
        self.thread: threading.Thread | None = None
        self._table: Any = None
        self._use_reset = True
        self._lag_base = float("inf")
        self._buf = bytearray(src.read_size)
        self.lines = 0
        # (db, scale) -> (all accesses, writes): windows of different scale stay apart
        self.acc: dict[tuple[int, float], tuple[Counter[bytes], Counter[bytes]]] = {}
        self._scale = 1.0 / src.duty
        self._win_start: float | None = None  # monotonic start of the current window
        self.acc_bytes = 0
        self.acc_ts = 0.0
        self._reset_seen = False

    # ----------------------------------------------------------- connect
    def _call(self, conn: RespConnection, what: str, *args: str | int) -> Any:
        try:
            return conn.call(*args)
        except RespError as exc:
            if _is_perm(exc):
                raise _perm_error(self.target, what, exc) from None
            raise

    def _auth(self, conn: RespConnection) -> None:
        r = self.target.redis
        if r.password is None:
            return
        args = ("AUTH", r.username, r.password) if r.username else ("AUTH", r.password)
        try:
            conn.call(*args)
        except RespError as exc:
            raise MonitorError(
                f"authentication as {r.username or 'default'!r} failed on {self.target.display}: {exc}"
            ) from None

    def connect(self, fresh: bool = True) -> None:
        """Open the MONITOR connection (and the control one), ready to stream.

        Args:
            fresh: start a new duty-cycle schedule (False when reconnecting is how
                the cycle leaves MONITOR mode on servers without RESET).
        """
        self.close_conns()
        try:
            self._connect(fresh)
        except RespError as exc:  # e.g. NOAUTH: a password is needed but none given
            raise MonitorError(f"{self.target.display} refused the tap: {exc}") from None

    def _connect(self, fresh: bool) -> None:
        src = self.src
        conn = RespConnection(self.target.redis, src.connect_timeout)
        self.conn = conn
        self._auth(conn)
        if fresh or self._table is None:  # the server may have been upgraded meanwhile
            try:
                reply = self._call(conn, "command|info", "COMMAND", "INFO")
            except RespError:  # pre-7.0: COMMAND INFO needs names; COMMAND lists all
                reply = self._call(conn, "command", "COMMAND")
            self._table = table_from_command_reply(reply)
        # a new parser: no partial line left over from the previous connection
        self.parser = Parser(
            self._table, skip_scripts=not src.count_script_calls, max_line=src.max_line
        )
        skip = [conn.local_addr]
        self.client_id = None
        if src.max_backlog_bytes > 0:
            try:
                self.client_id = int(conn.call("CLIENT", "ID"))
                ctl = RespConnection(self.target.redis, src.connect_timeout)
                self.ctl = ctl
                self._auth(ctl)
                ctl.call("CLIENT", "LIST", "ID", self.client_id)
                skip.append(ctl.local_addr)
            except RespError as exc:
                src.ratelog.warning(
                    "noomem",
                    "MONITOR tap on %s cannot poll its output buffer (%s); relying on the lag check",
                    self.target.display,
                    exc,
                )
                self.client_id = None
                if self.ctl is not None:
                    self.ctl.close()
                    self.ctl = None
        self.parser.set_skip(skip)
        self._lag_base = float("inf")
        if fresh:
            self._win_start = None
        self._start_monitor()

    def _start_monitor(self) -> None:
        """Send MONITOR and wait for +OK (the stream starts right after)."""
        assert self.conn is not None
        now = self.src.clock.monotonic()
        duty = self.src.duty
        if duty < 1.0 and self._win_start is not None:
            # this window stands for the time since the previous one started
            self._scale = max(_PERIOD, now - self._win_start) / (_PERIOD * duty)
        else:
            self._scale = 1.0 / duty
        self._win_start = now
        self.conn.send("MONITOR")
        reply = self.conn.read_reply()
        if isinstance(reply, RespError):
            if _is_perm(reply):
                raise _perm_error(self.target, "monitor", reply)
            raise MonitorError(f"MONITOR refused by {self.target.display}: {reply}")
        rest = self.conn.take_buffered()
        if rest:
            self._handle(self.parser.feed(rest))

    def close_conns(self) -> None:
        for c in (self.conn, self.ctl):
            if c is not None:
                c.close()
        self.conn = self.ctl = None

    # ----------------------------------------------------------- stream
    def _handle(self, res: tuple[Any, ...]) -> None:
        groups, replies, n_mon, _n_skip, n_bad, n_long, _n_unk, _ts0, ts1 = res
        src = self.src
        m = src.metrics
        if n_mon:
            self.lines += n_mon
            m.records.labels(source=_SOURCE).inc(n_mon)
            lag = src.clock.time() - ts1
            self._lag_base = min(self._lag_base, lag)
            if lag - self._lag_base > src.max_lag:
                raise _Backlog(f"MONITOR lines arrive {lag - self._lag_base:.1f}s late")
        if n_bad:
            m.malformed.labels(source=_SOURCE, reason="malformed").inc(n_bad)
            src.ratelog.warning(
                "malformed", "%d malformed MONITOR lines from %s", n_bad, self.target.display
            )
        if n_long:
            m.malformed.labels(source=_SOURCE, reason="too_long").inc(n_long)
            src.ratelog.warning(
                "toolong", "%d MONITOR lines over %d bytes dropped", n_long, src.max_line
            )
        for r in replies:
            if r.startswith(b"-"):
                raise MonitorError(f"{self.target.display} said {r.decode('utf-8', 'replace')}")
            if r == b"+RESET":
                self._reset_seen = True
        if groups:
            with src.cond:
                acc = self.acc
                for tag, keys in groups.items():
                    slot = (tag >> 1, self._scale)
                    pair = acc.get(slot)
                    if pair is None:
                        pair = acc[slot] = (Counter(), Counter())
                    pair[0].update(keys)
                    if tag & 1:
                        pair[1].update(keys)
                # MONITOR stamps lines with the server's clock; shift it onto ours by the
                # smallest offset seen on this connection, so skew is not taken for lag.
                shift = self._lag_base if self._lag_base != float("inf") else 0.0
                self.acc_ts = max(self.acc_ts, ts1 + shift)
                src.cond.notify()

    def account(self, nbytes: int) -> None:
        """Count bytes read since the last drain; too many means the detector is behind."""
        with self.src.cond:
            self.acc_bytes += nbytes
            if self.acc_bytes > self.src.max_pending_bytes:
                self.acc.clear()
                self.acc_bytes = 0
                raise _Backlog("the detector is not draining the tap (pending data over limit)")

    def drain(self) -> list[Batch]:
        """Swap out the pending counters as batches (caller holds src.cond)."""
        acc, ts = self.acc, self.acc_ts
        self.acc, self.acc_bytes = {}, 0
        out = []
        for db, scale in sorted(acc):
            allc, wc = acc[(db, scale)]
            out.append(
                Batch(
                    keys=list(allc),
                    counts=list(allc.values()),
                    writes=list(wc) if wc else None,
                    write_counts=list(wc.values()) if wc else None,
                    db=db,
                    ts=ts,
                    scale=scale,
                    source=_SOURCE,
                    meta={"server": self.target.display},
                )
            )
        return out

    def _poll_backlog(self) -> None:
        if self.ctl is None or self.client_id is None:
            return
        line = self.ctl.call("CLIENT", "LIST", "ID", self.client_id)
        fields = dict(f.split(b"=", 1) for f in bytes(line).split() if b"=" in f)
        omem = int(fields.get(b"omem", b"0"))
        if omem > self.src.max_backlog_bytes:
            raise _Backlog(f"its output buffer on the server is {omem} bytes")

    def _listen(self, until: float) -> None:
        """Read the stream until monotonic time ``until`` (inf: until stop)."""
        src, conn = self.src, self.conn
        assert conn is not None
        sock = conn.sock
        sock.settimeout(0.1)
        clock, stop = src.clock, src.stop_event
        next_poll = clock.monotonic() + src.poll_interval
        view = memoryview(self._buf)
        while not stop.is_set():
            now = clock.monotonic()
            if now >= until:
                return
            if now >= next_poll:
                self._poll_backlog()
                next_poll = now + src.poll_interval
            if until - now < 0.1:  # end the window on time: its length sets the scale
                sock.settimeout(max(0.001, until - now))
            try:
                n = sock.recv_into(view)
            except TimeoutError:
                continue
            if n == 0:
                raise _Closed(f"{self.target.display} closed the MONITOR connection")
            self.account(n)
            self._handle(self.parser.feed(view[:n]))

    def _pause(self) -> None:
        """Leave MONITOR mode for the off part of the duty cycle."""
        conn = self.conn
        assert conn is not None
        if not self._use_reset:
            self.close_conns()
            self._wait_next_window()
            self.connect(fresh=False)
            return
        self._reset_seen = False
        conn.send("RESET")
        sock = conn.sock
        sock.settimeout(0.1)
        view = memoryview(self._buf)
        while not self._reset_seen:
            try:
                n = sock.recv_into(view)
            except TimeoutError:
                continue
            if n == 0:
                raise _Closed(f"{self.target.display} closed the MONITOR connection")
            try:
                self.account(n)
                self._handle(self.parser.feed(view[:n]))
            except MonitorError as exc:
                if "RESET" not in str(exc).upper():
                    raise
                self._use_reset = False  # Redis < 6.2: no RESET; reconnect each cycle
                return self._pause()
        self._auth(conn)  # RESET de-authenticates
        self._wait_next_window()
        if not self.src.stop_event.is_set():
            self._start_monitor()

    def _wait_next_window(self) -> None:
        """Sleep until the next point of the 1 s grid (at once when already late)."""
        start = self._win_start if self._win_start is not None else self.src.clock.monotonic()
        self.src.stop_event.wait(max(0.0, start + _PERIOD - self.src.clock.monotonic()))

    def session(self) -> None:
        """Stream until stop or an error; duty-cycled when duty < 1."""
        duty = self.src.duty
        while not self.src.stop_event.is_set():
            if duty >= 1.0 or self._win_start is None:
                self._listen(float("inf"))
            else:
                self._listen(self._win_start + _PERIOD * duty)
                if not self.src.stop_event.is_set():
                    self._pause()

    # ----------------------------------------------------------- thread
    def run(self) -> None:
        src, m = self.src, self.src.metrics
        backoff = src.backoff_initial
        while not src.stop_event.is_set():
            before = self.lines
            try:
                if self.conn is None:
                    self.connect()
                self.session()
                continue
            except Exception as exc:  # classified below; the tap thread never dies
                failure: Exception = exc
            finally:
                self.close_conns()
            if src.stop_event.is_set():
                break
            reason, kind = self._classify(failure)
            m.monitor_disconnects.labels(reason=reason).inc()
            m.source_errors.labels(source=_SOURCE, kind=kind).inc()
            if self.lines > before:
                backoff = src.backoff_initial  # it worked for a while: retry fast
            src.stop_event.wait(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, src.backoff_max)

    def _classify(self, exc: Exception) -> tuple[str, str]:
        """(disconnect reason, source error kind) of a failure, logged at a limited rate."""
        where, rl = self.target.display, self.src.ratelog
        if isinstance(exc, _Backlog):
            logger.warning(
                "MONITOR tap on %s is behind (%s): disconnecting to protect Redis", where, exc
            )
            return "backlog", "backlog"
        if isinstance(exc, MonitorPermissionError):
            rl.error("perm", "%s", exc)
            return "error", "permission"
        if isinstance(exc, OSError):  # ConnectionError, timeouts, refused: a restart
            rl.warning("conn", "MONITOR tap on %s lost its connection: %s", where, exc)
            return "restart", "connection"
        rl.error("err", "MONITOR tap on %s failed: %s", where, exc)
        if not isinstance(exc, (MonitorError, RespError, ValueError)):
            logger.debug("unexpected tap failure", exc_info=exc)
        return "error", "protocol"


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
    """

    name = "monitor"

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
        max_line: int = 64 << 20,
        poll_interval: float = 0.5,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        count_script_calls: bool = False,
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
        self.max_backlog_bytes = max_backlog_bytes
        self.connect_timeout = connect_timeout
        self.max_lag = max_lag
        self.read_size = read_size
        self.max_line = max_line
        self.poll_interval = poll_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.count_script_calls = count_script_calls
        self.stop_event = threading.Event()
        self.ratelog = RateLimitedLog(logger, 10.0)
        self.max_pending_bytes = max_pending_bytes
        self.cond = threading.Condition()
        self.taps: list[_Tap] = []
        self._started = False

    @property
    def exhausted(self) -> bool:
        return False

    def _discover(self, target: MonitorTarget) -> list[MonitorTarget]:
        """A cluster seed -> its primaries; a standalone server -> itself."""
        if target.cluster == "no":
            return [target]
        tap = _Tap(self, target)
        try:
            conn = RespConnection(target.redis, self.connect_timeout)
        except OSError as exc:
            raise _unreachable(target, exc) from exc
        try:
            tap._auth(conn)
            try:
                text = conn.call("CLUSTER", "NODES")
            except RespError as exc:
                if "disabled" in str(exc) and target.cluster == "auto":
                    return [target]
                if _is_perm(exc) and target.cluster == "auto":
                    logger.warning(
                        "%s: no permission for CLUSTER NODES; tapping this node only",
                        target.display,
                    )
                    return [target]
                if _is_perm(exc):
                    raise _perm_error(target, "cluster|nodes", exc) from None
                raise MonitorError(f"{target.display} is not a cluster node: {exc}") from None
        except OSError as exc:
            raise MonitorError(f"cannot talk to {target.display}: {exc}") from exc
        finally:
            conn.close()
        nodes = parse_cluster_nodes(text, target.redis.host)
        if not nodes:
            raise MonitorError(f"{target.display}: CLUSTER NODES lists no reachable primary")
        logger.info("%s is a cluster: tapping %d primaries", target.display, len(nodes))
        return [target.with_node(h, p) for h, p in nodes]

    def start(self) -> None:
        """Discover nodes, connect each tap (failing fast on permission) and start readers.

        Raises:
            MonitorPermissionError: the user may not run a command the tap needs.
            MonitorError: a server is unreachable or refuses the tap at start.
        """
        if self._started:
            return
        nodes: list[MonitorTarget] = []
        for t in self.targets:
            nodes.extend(self._discover(t))
        seen = set()
        taps = []
        try:
            for n in nodes:
                key = (n.redis.host, n.redis.port)
                if key in seen:
                    continue
                seen.add(key)
                tap = _Tap(self, n)
                taps.append(tap)
                try:
                    tap.connect()
                except OSError as exc:
                    raise _unreachable(n, exc) from exc
        except BaseException:
            for tap in taps:
                tap.close_conns()
            raise
        self.taps = taps
        self._started = True
        for tap in taps:
            tap.thread = threading.Thread(
                target=tap.run, name=f"hotkeyd-monitor-{tap.target.display}", daemon=True
            )
            tap.thread.start()

    def next_batch(self, max_wait: float) -> list[Batch]:
        """Counts collected since the last call (one batch per server and db).

        Waits at most ``max_wait`` seconds for the first access to arrive.
        """
        with self.cond:
            if not any(t.acc for t in self.taps) and max_wait > 0:
                self.cond.wait(max_wait)
            out: list[Batch] = []
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
        for tap in self.taps:
            tap.close_conns()
        for tap in self.taps:
            if tap.thread is not None and tap.thread is not threading.current_thread():
                tap.thread.join(timeout=5.0)
        self.taps = []
