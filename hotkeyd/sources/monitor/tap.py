"""One tapped server: its MONITOR connection, reader thread and pending counts.

Split from :mod:`hotkeyd.sources.monitor.source` (which owns discovery and the Source API);
see that module for the design. A :class:`Tap` reads the raw stream in large chunks,
hands them to the C parser (GIL released), folds the keys into per-(db, window scale)
counters, duty-cycles with MONITOR/RESET, and disconnects when it falls behind.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hotkeyd.backoff import Backoff
from hotkeyd.batch import Batch
from hotkeyd.clock import Clock
from hotkeyd.errors import MonitorError, MonitorPermissionError, UnreachableError
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
    perm_error,
)
from hotkeyd.sources.monitor.keyspec import table_from_command_reply
from hotkeyd.sources.monitor.parser import Parser

__all__ = ["PERIOD", "Tap", "TapConfig", "TapShared"]

logger = logging.getLogger("hotkeyd.sources.monitor.source")
_SOURCE = "monitor"
PERIOD = 1.0  # duty-cycle period, seconds


class _Backlog(MonitorError):
    """The tap fell behind: disconnect before Redis buffers without bound."""


class _Closed(UnreachableError):
    """The server closed the connection (restart, kill, timeout)."""


@dataclass(frozen=True)
class TapConfig:
    """How every tap of a source reads (see :class:`~hotkeyd.sources.monitor.source.MonitorSource`)."""

    duty: float = 1.0
    connect_timeout: float = 5.0
    max_backlog_bytes: int = 64 << 20
    max_lag: float = 10.0
    max_pending_bytes: int = 256 << 20
    read_size: int = 1 << 20
    max_line: int = 16 << 20
    poll_interval: float = 0.5
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    count_script_calls: bool = False


@dataclass
class TapShared:
    """What the taps of one source share with it: where counts and reports go.

    Attributes:
        cond: guards every tap's pending counters; notified when counts arrive.
        first_contact: called (from the tap's thread) before a tap whose seed was down
            at start first connects, to learn whether the seed is a cluster node.
    """

    metrics: Metrics
    clock: Clock
    ratelog: RateLimitedLog
    cond: threading.Condition
    first_contact: Callable[[Tap], None]


class Tap:
    """One server's MONITOR connection and its reader thread."""

    def __init__(
        self,
        cfg: TapConfig,
        shared: TapShared,
        target: MonitorTarget,
        seed: MonitorTarget | None = None,
    ) -> None:
        self.cfg = cfg
        self.shared = shared
        self.target = target
        self.seed = seed  # the cluster seed URL this primary was discovered from
        self.parser = Parser(skip_scripts=not cfg.count_script_calls, max_line=cfg.max_line)
        self.conn: RespConnection | None = None
        self.ctl: RespConnection | None = None
        self.client_id: int | None = None
        self.thread: threading.Thread | None = None
        self._table: Any = None
        self._use_reset = True
        self._lag_base = float("inf")
        self._buf = bytearray(cfg.read_size)
        self.lines = 0
        # (db, scale) -> (all accesses, writes): windows of different scale stay apart
        self.acc: dict[tuple[int, float], tuple[Counter[bytes], Counter[bytes]]] = {}
        self._scale = 1.0 / cfg.duty
        self._win_start: float | None = None  # monotonic start of the current window
        self.acc_bytes = 0
        self.acc_ts = 0.0
        self._reset_seen = False
        self.stop_event = threading.Event()  # set by the source on close or topology change
        self.discover = False  # seed unreachable at start: ask CLUSTER NODES on first contact
        self.failed_at_start = False  # start() could not connect: wait before the first retry
        self.ever_connected = False  # failures before the first connection are "unreachable"

    # ----------------------------------------------------------- connect
    def _call(self, conn: RespConnection, what: str, *args: str | int) -> Any:
        try:
            return conn.call(*args)
        except RespError as exc:
            if is_perm(exc):
                raise perm_error(self.target, what, exc) from None
            raise

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
            if not_ready(exc):
                raise Unreachable(f"{self.target.display} is not ready: {exc}") from None
            raise MonitorError(f"{self.target.display} refused the tap: {exc}") from None
        self.ever_connected = True

    def _connect(self, fresh: bool) -> None:
        src, cfg = self.shared, self.cfg
        conn = RespConnection(self.target.redis, cfg.connect_timeout)
        self.conn = conn
        authenticate(conn, self.target)
        if fresh or self._table is None:  # the server may have been upgraded meanwhile
            try:
                reply = self._call(conn, "command|info", "COMMAND", "INFO")
            except RespError:  # pre-7.0: COMMAND INFO needs names; COMMAND lists all
                reply = self._call(conn, "command", "COMMAND")
            self._table = table_from_command_reply(reply)
        # a new parser: no partial line left over from the previous connection
        self.parser = Parser(
            self._table, skip_scripts=not cfg.count_script_calls, max_line=cfg.max_line
        )
        skip = [conn.local_addr]
        self.client_id = None
        if cfg.max_backlog_bytes > 0:
            try:
                self.client_id = int(conn.call("CLIENT", "ID"))
                ctl = RespConnection(self.target.redis, cfg.connect_timeout)
                self.ctl = ctl
                authenticate(ctl, self.target)
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
        now = self.shared.clock.monotonic()
        duty = self.cfg.duty
        if duty < 1.0 and self._win_start is not None:
            # this window stands for the time since the previous one started
            self._scale = max(PERIOD, now - self._win_start) / (PERIOD * duty)
        else:
            self._scale = 1.0 / duty
        self._win_start = now
        self.conn.send("MONITOR")
        reply = self.conn.read_reply()
        if isinstance(reply, RespError):
            if is_perm(reply):
                raise perm_error(self.target, "monitor", reply)
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
        src, cfg = self.shared, self.cfg
        m = src.metrics
        if n_mon:
            self.lines += n_mon
            m.records.labels(source=_SOURCE).inc(n_mon)
            lag = src.clock.time() - ts1
            self._lag_base = min(self._lag_base, lag)
            if lag - self._lag_base > cfg.max_lag:
                raise _Backlog(f"MONITOR lines arrive {lag - self._lag_base:.1f}s late")
        if n_bad:
            m.malformed.labels(source=_SOURCE, reason="malformed").inc(n_bad)
            src.ratelog.warning(
                "malformed", "%d malformed MONITOR lines from %s", n_bad, self.target.display
            )
        if n_long:
            m.malformed.labels(source=_SOURCE, reason="too_long").inc(n_long)
            src.ratelog.warning(
                "toolong", "%d MONITOR lines over %d bytes dropped", n_long, cfg.max_line
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
        with self.shared.cond:
            self.acc_bytes += nbytes
            if self.acc_bytes > self.cfg.max_pending_bytes:
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
                )
            )
        return out

    def _poll_backlog(self) -> None:
        if self.ctl is None or self.client_id is None:
            return
        line = self.ctl.call("CLIENT", "LIST", "ID", self.client_id)
        fields = dict(f.split(b"=", 1) for f in bytes(line).split() if b"=" in f)
        omem = int(fields.get(b"omem", b"0"))
        if omem > self.cfg.max_backlog_bytes:
            raise _Backlog(f"its output buffer on the server is {omem} bytes")

    def _listen(self, until: float) -> None:
        """Read the stream until monotonic time ``until`` (inf: until stop)."""
        src, cfg, conn = self.shared, self.cfg, self.conn
        assert conn is not None
        sock = conn.sock
        sock.settimeout(0.1)
        clock, stop = src.clock, self.stop_event
        next_poll = clock.monotonic() + cfg.poll_interval
        view = memoryview(self._buf)
        while not stop.is_set():
            now = clock.monotonic()
            if now >= until:
                return
            if now >= next_poll:
                self._poll_backlog()
                next_poll = now + cfg.poll_interval
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
        authenticate(conn, self.target)  # RESET de-authenticates
        self._wait_next_window()
        if not self.stop_event.is_set():
            self._start_monitor()

    def _wait_next_window(self) -> None:
        """Sleep until the next point of the 1 s grid (at once when already late)."""
        start = self._win_start if self._win_start is not None else self.shared.clock.monotonic()
        self.stop_event.wait(max(0.0, start + PERIOD - self.shared.clock.monotonic()))

    def session(self) -> None:
        """Stream until stop or an error; duty-cycled when duty < 1."""
        duty = self.cfg.duty
        while not self.stop_event.is_set():
            if duty >= 1.0 or self._win_start is None:
                self._listen(float("inf"))
            else:
                self._listen(self._win_start + PERIOD * duty)
                if not self.stop_event.is_set():
                    self._pause()

    # ----------------------------------------------------------- thread
    def run(self) -> None:
        src, m = self.shared, self.shared.metrics
        backoff = Backoff(self.cfg.backoff_initial, self.cfg.backoff_max)
        if self.failed_at_start:  # start() just tried: back off before the first retry
            self.stop_event.wait(backoff.next_delay())
        while not self.stop_event.is_set():
            before = self.lines
            try:
                if self.conn is None:
                    if self.discover:  # first contact with a seed: cluster or not?
                        src.first_contact(self)
                        if self.stop_event.is_set():
                            break  # a cluster seed that is not a primary: others tap it
                    self.connect()
                self.session()
                continue
            except Exception as exc:  # classified below; the tap thread never dies
                failure: Exception = exc
            finally:
                self.close_conns()
            if self.stop_event.is_set():
                break
            reason, kind = self._classify(failure)
            m.monitor_disconnects.labels(reason=reason).inc()
            m.source_errors.labels(source=_SOURCE, kind=kind).inc()
            if self.lines > before:
                backoff.reset()  # it worked for a while: retry fast
            self.stop_event.wait(backoff.next_delay())

    def _classify(self, exc: Exception) -> tuple[str, str]:
        """(disconnect reason, source error kind) of a failure, logged at a limited rate."""
        where, rl = self.target.display, self.shared.ratelog
        if isinstance(exc, _Backlog):
            logger.warning(
                "MONITOR tap on %s is behind (%s): disconnecting to protect Redis", where, exc
            )
            return "backlog", "backlog"
        if isinstance(exc, MonitorPermissionError):
            rl.error(f"perm:{where}", "%s", exc)
            return "error", "permission"
        if isinstance(exc, (OSError, Unreachable)):  # refused, timeouts, DNS, reset
            if not self.ever_connected:
                rl.warning(
                    f"conn:{where}",
                    "MONITOR: %s still unreachable (%s); retrying with backoff",
                    where,
                    exc,
                )
                return "unreachable", "connection"
            rl.warning(f"conn:{where}", "MONITOR tap on %s lost its connection: %s", where, exc)
            return "restart", "connection"
        rl.error(f"err:{where}", "MONITOR tap on %s failed: %s", where, exc)
        if not isinstance(exc, (MonitorError, RespError, ValueError)):
            logger.debug("unexpected tap failure", exc_info=exc)
        return "error", "protocol"
