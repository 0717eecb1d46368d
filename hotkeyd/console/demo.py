"""``hotkeyd demo``: the whole system in one command, in about fifteen seconds.

It starts a throwaway ``redis-server`` on a free port (when one is installed), runs
the daemon in-process on a seeded Zipf workload in which one key turns hot and then
cools, runs a client-SDK subscriber against the real channel, and draws a live view
of the top keys with a sparkline each. It ends with a summary: how long the
subscriber took to learn the key was hot (and cool), and how many events went by.

With Redis, the subscribed app also *serves* the hot key from its cache, as
``HotCache`` would: while the key is hot its accesses no longer reach the daemon's
source, and the app's demand reports carry them instead (the closed loop), so the
view shows how much of the demand the cache absorbed (``LOCAL%``) while the key stays
hot for as long as the spike lasts.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from hotkeyd.batch import Batch
from hotkeyd.daemon.config import Settings
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.protocol.wire import HotEntry, Message, decode_key
from hotkeyd.sources.synthetic import Spike, SyntheticSource

__all__ = ["DemoSummary", "run_demo"]

logger = logging.getLogger(__name__)

SPARKS = " ▁▂▃▄▅▆▇█"
HOT_KEY = b"item:flash-sale"
INSTALL_HINT = (
    "redis-server is not installed, so the demo runs without Redis pub/sub.\n"
    "  Debian/Ubuntu: sudo apt-get install -y redis-server\n"
    "  macOS:         brew install redis\n"
    "  Docker:        docker run -p 6379:6379 redis:7"
)


class _ScratchRedis:
    """A throwaway ``redis-server`` on a free loopback port, without persistence.

    The demo's own (not :mod:`hotkeyd.testing`'s, which is test tooling): it only needs
    one server for one run, started and stopped around it.
    """

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.dir = tempfile.TemporaryDirectory(prefix="hotkeyd-demo-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", self.dir.name]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.dir.cleanup()


@dataclass
class DemoSummary:
    """What the demo measured."""

    events: int = 0
    seconds: float = 0.0
    threshold: float = 0.0
    spike_start: float = 0.0
    spike_end: float = 0.0
    hot_at: float | None = None
    cool_at: float | None = None
    with_redis: bool = False
    hot_keys_seen: list[bytes] = field(default_factory=list)
    local_share: float | None = None  # of the hot key's demand, served by the app's cache

    @property
    def detection_latency(self) -> float | None:
        """Seconds from the spike's first access to the subscriber learning it is hot."""
        return None if self.hot_at is None else self.hot_at - self.spike_start

    @property
    def cool_latency(self) -> float | None:
        """Seconds from the spike's end to the subscriber learning it cooled."""
        return None if self.cool_at is None else self.cool_at - self.spike_end


def _sparkline(values: deque[float], width: int) -> str:
    vals = list(values)[-width:]
    top = max(vals, default=0.0)
    if top <= 0:
        return " " * len(vals)
    return "".join(
        SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] for v in vals
    )


class _AppCache:
    """The demo app's cache in front of the synthetic traffic (a source wrapper).

    Accesses of keys the app holds hot are served "locally": they are dropped from
    what the daemon's source sees and counted on the hot-set entry, exactly where
    ``HotCache`` counts them, for the demand reporter to send.
    """

    def __init__(self, source: SyntheticSource, hotset: Any) -> None:
        self.source = source
        self.name = source.name
        self._items = hotset.items
        self._clock = hotset.clock

    def __getattr__(self, name: str) -> Any:  # start, commit, exhausted, close, events ...
        return getattr(self.source, name)

    def next_batch(self, max_wait: float) -> list[Batch]:
        out = []
        now = self._clock.monotonic()
        for b in self.source.next_batch(max_wait):
            if b.lines is None or not self._items:
                out.append(b)
                continue
            kept = []
            for line in bytes(b.lines).split(b"\n"):
                item = self._items.get(line)
                if item is not None and item.expires > now:
                    item.served += 1
                else:
                    kept.append(line)
            if kept:
                out.append(Batch(lines=b"\n".join(kept), source=b.source))
        return out


def _fmt_key(entry: dict[str, Any]) -> str:
    return decode_key(entry).decode("utf-8", "backslashreplace")[:28]


def run_demo(
    *,
    duration: float = 14.0,
    rate: float = 150_000.0,
    universe: int = 100_000,
    alpha: float = 1.0,
    use_redis: bool = True,
    out: IO[str] | None = None,
    live: bool | None = None,
    refresh: float = 0.25,
    on_frame: Callable[[str], None] | None = None,
) -> DemoSummary:
    """Run the demo and return its summary (also printed to ``out``)."""
    from hotkeyd.client import HotSet, Subscriber
    from hotkeyd.client.demand import DemandCounter, DemandReporter
    from hotkeyd.daemon.service import Service
    from hotkeyd.publish import MemoryPublisher

    out = out or sys.stdout
    live = out.isatty() if live is None else live
    summary = DemoSummary()

    # A threshold well above the busiest background key, and a spike far above it.
    src_probe = SyntheticSource(rate=rate, universe=universe, alpha=alpha, duration=0)
    top_bg = float(src_probe._cdf[0]) * rate
    threshold = float(max(500, round(3 * top_bg, -2)))
    spike_rate = 4 * threshold
    spike_start, spike_end = duration * 0.2, duration * 0.55
    summary.threshold = threshold
    rules = RuleSet(
        default=Rule("default", threshold=threshold, ttl=2.0, cooldown=1.0), source="<demo>"
    )

    server = None
    redis_url = None
    if use_redis and shutil.which("redis-server"):
        server = _ScratchRedis()
        server.start()
        redis_url = server.url
        summary.with_redis = True
    elif use_redis:
        print(INSTALL_HINT, file=out)

    source = SyntheticSource(
        rate=rate,
        universe=universe,
        alpha=alpha,
        spikes=[Spike(HOT_KEY, spike_start, spike_end, spike_rate)],
        duration=duration,
    )

    def hotset_apply(msg: Message) -> None:
        hotset.apply(msg, force=True)  # in-process: no snapshot to resync from

    settings = Settings(
        redis_url=redis_url, http_port=None, namespace="hotkeyd-demo", instance="demo"
    )
    publisher = None if redis_url else MemoryPublisher(instance="demo", on_message=hotset_apply)
    hotset = HotSet()
    app_source: Any = _AppCache(source, hotset) if redis_url else source
    service = Service(settings, sources=[app_source], publisher=publisher, rules=rules)

    t0 = time.monotonic()

    def on_hot(entry: HotEntry) -> None:
        summary.hot_keys_seen.append(entry.key)
        if entry.key == HOT_KEY and summary.hot_at is None:
            summary.hot_at = time.monotonic() - t0

    def on_cool(key: bytes) -> None:
        if key == HOT_KEY and summary.hot_at is not None and summary.cool_at is None:
            summary.cool_at = time.monotonic() - t0

    hotset.add_listener(on_hot=on_hot, on_cool=on_cool)
    subscriber = None
    reporter = None
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
        subscriber = Subscriber(client, hotset, namespace=service.namespace)
        subscriber.start()
        subscriber.wait_ready(5)
        counter = DemandCounter(hotset, "demo-app", service.namespace, hotset.clock)
        reporter = DemandReporter(counter, client.publish)
        reporter.start()

    history: dict[str, deque[float]] = {}
    shares: list[float] = []
    t0 = time.monotonic()
    source.start()
    runner = threading.Thread(target=service.run, name="hotkeyd-demo", daemon=True)
    runner.start()
    try:
        last_line = -1
        while runner.is_alive():
            time.sleep(refresh)
            elapsed = time.monotonic() - t0
            hot, top = service.view
            hot_ids = {h.key for h in hot}
            for e in top[:8]:
                history.setdefault(e["key"], deque(maxlen=48)).append(float(e["rate"]))
                if decode_key(e) == HOT_KEY and HOT_KEY in hot_ids and float(e["rate"]) > 0:
                    shares.append(float(e.get("local", 0.0)) / float(e["rate"]))
            frame = _frame(
                elapsed, duration, source.events, threshold, top[:8], hot_ids, history, hotset
            )
            if on_frame is not None:
                on_frame(frame)
            if live:
                out.write("\x1b[H\x1b[2J" + frame + "\n")
                out.flush()
            elif int(elapsed) != last_line:
                last_line = int(elapsed)
                hot_txt = (
                    ", ".join(k.decode("utf-8", "replace") for k in sorted(hotset.keys())) or "-"
                )
                out.write(
                    f"t={elapsed:5.1f}s events={source.events:>10,} app sees hot: {hot_txt}\n"
                )
                out.flush()
    except KeyboardInterrupt:
        service.request_stop()
    finally:
        runner.join(10)
        time.sleep(0.3)  # let the last messages reach the subscriber
        if reporter is not None:
            reporter.stop()
        if subscriber is not None:
            subscriber.stop()
        if server is not None:
            server.stop()
    summary.events = source.events
    summary.seconds = time.monotonic() - t0
    summary.spike_start, summary.spike_end = spike_start, spike_end
    if shares:
        summary.local_share = sorted(shares)[len(shares) // 2]
    out.write(_summary_text(summary) + "\n")
    out.flush()
    return summary


def _frame(
    elapsed: float,
    duration: float,
    events: int,
    threshold: float,
    top: list[dict[str, Any]],
    hot_ids: set[bytes],
    history: dict[str, deque[float]],
    hotset: Any,
) -> str:
    lines = [
        f"hotkeyd demo  {elapsed:5.1f}/{duration:.0f}s   events {events:,}   "
        f"threshold {threshold:,.0f}/s   (Ctrl-C to stop)",
        "",
        f"  {'KEY':<28} {'RATE/s':>10} {'LOCAL%':>6}  {'STATE':<5}  HISTORY",
    ]
    for e in top:
        key = decode_key(e)
        state = "HOT" if key in hot_ids else ""
        spark = _sparkline(history.get(e["key"], deque()), 48)
        rate, local = float(e["rate"]), float(e.get("local", 0.0))
        pct = f"{100 * local / rate:.0f}%" if rate > 0 and local > 0 else "-"
        lines.append(f"  {_fmt_key(e):<28} {rate:>10,.0f} {pct:>6}  {state:<5}  {spark}")
    app = ", ".join(k.decode("utf-8", "replace") for k in sorted(hotset.keys())) or "(none)"
    lines += [
        "",
        f"  subscribed app's hot set: {app}",
        "  LOCAL% = share of the rate the app served from its cache (its demand reports)",
    ]
    return "\n".join(lines)


def _summary_text(s: DemoSummary) -> str:
    lat = s.detection_latency
    cool = s.cool_latency
    rows = [
        "",
        "summary",
        f"  events processed   {s.events:,} in {s.seconds:.1f}s ({s.events / max(s.seconds, 1e-9):,.0f}/s)",
        f"  hot threshold      {s.threshold:,.0f} accesses/s (spike ran at 4x from t={s.spike_start:.1f}s to {s.spike_end:.1f}s)",
        "  detection latency  "
        + (
            f"{lat * 1000:.0f} ms (spike start -> subscriber knew it was hot)"
            if lat is not None
            else "not detected"
        ),
        "  cool-down          "
        + (
            f"{cool * 1000:.0f} ms after the spike ended (cool-down 1 s + window 1 s)"
            if cool is not None
            else "did not cool"
        ),
        "  pub/sub            "
        + ("real redis-server on a free port" if s.with_redis else "in-process (no redis-server)"),
    ]
    if s.local_share is not None:
        rows.append(
            f"  served locally     {s.local_share:.0%} of the hot key's demand while hot "
            "(the app's cache; its demand reports kept the key hot)"
        )
    rows += ["", *NEXT_STEPS]
    return "\n".join(rows)


# What to try after the demo (the last lines `make run` prints).
NEXT_STEPS = (
    "try next",
    "  . .venv/bin/activate                                  # hotkeyd on PATH (from a clone)",
    "  hotkeyd run -s redis-monitor://127.0.0.1:6379 --redis-url redis://127.0.0.1:6379/0"
    "   # your Redis",
    "  hotkeyd top --redis-url redis://127.0.0.1:6379/0 --watch   # what is hot, live",
    "  make -C examples/flash_sale run                       # a service with HotCache",
)
