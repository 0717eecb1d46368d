"""The console's routes: the page, its static files, and the JSON it polls.

Read-only, and it only reads what the daemon already publishes to its other threads: the
view replaced whole at each tick (``Service.view``), the detector's lags, the health
document, the metrics registry, the :class:`~hotkeyd.web.memory.KeyMemory` and, with a
Redis URL, the ``{ns}:history`` stream. Routes (all behind :class:`~hotkeyd.web.security.Guard`):

* ``GET /`` -- the page; ``/static/<file>`` -- its script and style (package data).
* ``GET /api/now`` -- every hot key and the top keys: rate, last-minute sparkline, state,
  rule, LOCAL share, read/write, lag. Built twice a second at most, however many tabs poll.
* ``GET /api/key?k=<base64url>&db=N`` -- one key: rate history, intervals, instances, rule.
* ``GET /api/history?glob=&since=&until=&format=json|csv`` -- hot intervals, de-duplicated.
* ``GET /api/health`` -- sources, lag, publisher, demand intake, and every hotkeyd metric.

Keys are untrusted bytes: they go out as JSON strings (UTF-8 text, or hex for anything
else, flagged ``"hex": true``) and the page only ever sets them as ``textContent``.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry

from hotkeyd.detector.glob import Glob
from hotkeyd.detector.intervals import Interval
from hotkeyd.web.memory import KeyMemory
from hotkeyd.web.security import SECURITY_HEADERS, Guard

__all__ = ["Console", "ConsoleSource", "Response", "show_key"]

logger = logging.getLogger(__name__)

_STATIC = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_HISTORY_HOURS_MAX = 96.0
_NOW_MAX_AGE = 0.5  # s a built Now document is served again (page polls each 1 s)
_HISTORY_ROWS_MAX = 50_000


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ConsoleSource:
    """What the console reads from the running daemon (callables, so nothing is copied).

    Attributes:
        instance: this daemon's id.
        view: returns ``(hot entries, top rows)`` as of the last tick.
        lags: returns seconds behind per source lane.
        health: returns ``(healthy, details)`` as ``/healthz`` does.
        registry: the Prometheus registry (its samples fill the Health view).
        memory: the bounded per-key history.
        history: reads ``{ns}:history`` intervals (since, until, glob) -> list, or None
            without Redis (then the memory's own intervals are shown).
        components: returns the sources/publisher/demand/watch states for Health.
        announcers: ``(db, key) -> instances`` whose snapshot in Redis has the key hot
            (every daemon of the namespace), or None without Redis.
        demand: the daemon takes demand reports (the memory then has each app's last).
    """

    instance: str
    view: Callable[[], tuple[list[Any], list[dict[str, Any]]]]
    lags: Callable[[], dict[str, float]]
    health: Callable[[], tuple[bool, dict[str, Any]]]
    registry: CollectorRegistry
    memory: KeyMemory
    history: Callable[[float, float | None, bytes | None], list[Interval]] | None = None
    components: Callable[[], dict[str, Any]] = lambda: {}
    clock: Callable[[], float] = time.time
    announcers: Callable[[int, bytes], list[str]] | None = None
    demand: bool = False


def show_key(key: bytes) -> dict[str, Any]:
    """A key as the page shows it: text when UTF-8, else hex (``"hex": true``)."""
    try:
        return {"key": key.decode("utf-8")}
    except UnicodeDecodeError:
        return {"key": key.hex(), "hex": True}


def _key_id(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")


def _parse_key_id(raw: str) -> bytes:
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))


def _json(body: Any, status: int = 200) -> Response:
    data = json.dumps(body, separators=(",", ":"), default=str).encode("utf-8")
    return Response(status, data, "application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


class Console:
    """Answers the console's requests; :meth:`handle` is what the HTTP server calls.

    Args:
        source: what the console reads.
        guard: the Host/token check.
    """

    def __init__(self, source: ConsoleSource, guard: Guard) -> None:
        self.src = source
        self.guard = guard
        self._now_lock = threading.Lock()
        self._now_cache: tuple[float, bytes] | None = None
        self.refused = 0
        self.now_builds = 0  # Now documents built, and the CPU seconds they took (Health)
        self.now_build_cpu = 0.0

    def owns(self, path: str) -> bool:
        route = urlsplit(path).path
        return route in ("/", "/index.html") or route.startswith(("/static/", "/api/"))

    def handle(self, path: str, headers: Message) -> Response:
        """The response to ``GET path`` (security headers included)."""
        refused = self.guard.check(headers)
        if refused is not None:
            self.refused += 1
            resp = (
                _error(421, "this console answers only on the address it is bound to")
                if refused == 421
                else _error(401, "authentication required")
            )
            if refused == 401:
                resp.headers["WWW-Authenticate"] = 'Basic realm="hotkeyd console", charset="UTF-8"'
        else:
            resp = self._route(path)
        resp.headers.update(SECURITY_HEADERS)
        return resp

    def _route(self, path: str) -> Response:
        parts = urlsplit(path)
        route = parts.path
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if route in ("/", "/index.html"):
            return self._asset("index.html", "text/html; charset=utf-8")
        if route.startswith("/static/"):
            name = route[len("/static/") :]
            if name not in _STATIC:
                return _error(404, "not found")
            return self._asset(name, _STATIC[name])
        if route == "/api/now":
            return Response(200, self.now_json(), "application/json")
        if route == "/api/key":
            return self._key(q)
        if route == "/api/history":
            return self._history(q)
        if route == "/api/health":
            return _json(self.health_json())
        return _error(404, "not found")

    @staticmethod
    def _asset(name: str, content_type: str) -> Response:
        data = resources.files("hotkeyd.web").joinpath("static").joinpath(name).read_bytes()
        return Response(200, data, content_type, {"Cache-Control": "no-cache"})

    # -- Now ------------------------------------------------------------------------------
    def now_json(self) -> bytes:
        """The Now document, rebuilt at most every ``_NOW_MAX_AGE`` seconds.

        However many tabs poll, the daemon builds it at most twice a second; one tab
        polling each second gets a fresh one each time, at most half a second old.
        """
        now = self.src.clock()
        with self._now_lock:
            if self._now_cache is not None and 0 <= now - self._now_cache[0] < _NOW_MAX_AGE:
                return self._now_cache[1]
            cpu = time.thread_time()
            data = json.dumps(self._now(now), separators=(",", ":")).encode("utf-8")
            self.now_builds += 1
            self.now_build_cpu += time.thread_time() - cpu
            self._now_cache = (now, data)
            return data

    def _now(self, now: float) -> dict[str, Any]:
        hot, top = self.src.view()
        rows: dict[tuple[int, bytes], dict[str, Any]] = {}
        for h in hot:
            row = show_key(h.key)
            row.update(
                id=_key_id(h.key),
                db=h.db,
                rate=round(h.rate, 3),
                hot=True,
                rule=h.rule,
                ttl_ms=h.ttl_ms,
                since=round(h.since, 3),
                kind=h.kind,
                lag_ms=h.lag_ms,
            )
            rows[(h.db, h.key)] = row
        for t in top:
            key = _top_key(t)
            ident = (int(t.get("db", 0)), key)
            found = rows.get(ident)
            if found is None:
                row = rows[ident] = show_key(key)
                row.update(id=_key_id(key), db=ident[0], hot=bool(t.get("hot")), rule=t.get("rule"))
            else:
                row = found
            row["rate"] = t.get("rate", row.get("rate", 0.0))
            row["local"] = t.get("local", 0.0)
            if t.get("kind") is not None:
                row["kind"] = t["kind"]
        sparks = self.src.memory.sparks(rows.keys(), now)
        for ident, row in rows.items():
            row["spark"] = sparks.get(ident, "")
            rate = row.get("rate") or 0.0
            row["local_pct"] = round(100.0 * row.get("local", 0.0) / rate, 1) if rate > 0 else 0.0
        ordered = sorted(rows.values(), key=lambda r: (not r["hot"], -(r.get("rate") or 0.0)))
        lags = self.src.lags()
        return {
            "instance": self.src.instance,
            "ts": round(now, 3),
            "lag_seconds": {k: round(v, 3) for k, v in sorted(lags.items())},
            "hot_count": len(hot),
            "rows": ordered,
        }

    # -- a key ----------------------------------------------------------------------------
    def _key(self, q: dict[str, str]) -> Response:
        try:
            key = _parse_key_id(q.get("k", ""))
            db = int(q.get("db", "0"))
        except (binascii.Error, ValueError):
            return _error(400, "k must be a base64url key and db an integer")
        now = self.src.clock()
        ident = (db, key)
        hot, _top = self.src.view()
        entry = next((h for h in hot if h.db == db and h.key == key), None)
        track = self.src.memory.track(ident)
        cannot: list[str] = []
        doc: dict[str, Any] = show_key(key)
        doc.update(id=_key_id(key), db=db, instance=self.src.instance, hot=entry is not None)
        if entry is not None:
            doc.update(
                rule=entry.rule,
                ttl_ms=entry.ttl_ms,
                since=entry.since,
                rate=entry.rate,
                kind=entry.kind,
                lag_ms=entry.lag_ms,
            )
        elif track is not None:
            doc.update(rule=track.rule, kind=track.kind)
            cannot.append("TTL: announced only while the key is hot")
        series = self.src.memory.series(ident, now)
        if series is None:
            cannot.append(
                f"rate history: not tracked (the daemon keeps {self.src.memory.seconds} s for "
                "keys it saw hot or in its top list)"
            )
        doc["series"] = series or []
        doc["series_seconds"] = self.src.memory.seconds
        if track is not None:
            doc["local"] = round(track.local, 3)
        intervals, where = self._intervals(now - 6 * 3600, None, None)
        mine = [iv for iv in intervals if iv.key == key and iv.db == db]
        doc["intervals"] = [_interval_json(iv) for iv in mine]
        doc["intervals_from"] = where
        doc["instances"], doc["instances_from"] = self._announced(db, key, entry is not None)
        if doc["instances_from"] != "snapshots":
            cannot.append(
                "other instances: without Redis only this daemon is known (the instances "
                "that announced a key are read from every daemon's snapshot in Redis)"
            )
        doc["demand"] = self._demand(ident, now)
        if not self.src.demand:
            cannot.append(
                "demand per app: this daemon takes no demand reports (they come over Redis: "
                "--redis-url with --demand-reports)"
            )
        else:
            if track is None:
                cannot.append("demand per app: kept only for keys the daemon tracks (hot or top)")
            cannot.append(
                "demand reported to other instances: apps report to the daemon that announced "
                "the key, and each daemon hears only its own demand channel"
            )
        doc["cannot_show"] = cannot
        return _json(doc)

    def _announced(self, db: int, key: bytes, hot_here: bool) -> tuple[list[str], str]:
        """The instances announcing the key now, and where that came from."""
        if self.src.announcers is not None:
            try:
                return self.src.announcers(db, key), "snapshots"
            except Exception as exc:  # Redis down: this daemon's own view, and say so
                logger.warning("console snapshots: %s", exc)
        return ([self.src.instance] if hot_here else []), "this daemon"

    def _demand(self, ident: tuple[int, bytes], now: float) -> list[dict[str, Any]]:
        """Each app's last report for the key: reads served locally, per second, age."""
        out = []
        for app, r in sorted(self.src.memory.apps(ident).items()):
            secs = max(r.interval_ms, 1) / 1000.0
            out.append(
                {
                    "app": app,
                    "n": r.n,
                    "interval_ms": r.interval_ms,
                    "rate": round(r.n / secs, 3),
                    "age_s": round(now - r.ts, 3),
                }
            )
        return out

    # -- History --------------------------------------------------------------------------
    def _intervals(
        self, since: float, until: float | None, glob: bytes | None
    ) -> tuple[list[Interval], str]:
        if self.src.history is not None:
            rows = self.src.history(since, until, glob)
            where = "redis"
        else:
            g = Glob(glob) if glob else None
            rows = [
                iv
                for iv in self.src.memory.intervals(self.src.clock())
                if (iv.end is None or iv.end >= since)
                and (until is None or iv.start <= until)
                and (g is None or g.match(iv.key))
            ]
            where = "memory"
        seen: set[tuple[str, int, bytes, float, float | None]] = set()
        out = []
        for iv in rows:  # the same transition written twice (a retried XADD) shows once
            ident = (iv.instance, iv.db, iv.key, round(iv.start, 3), iv.end and round(iv.end, 3))
            if ident not in seen:
                seen.add(ident)
                out.append(iv)
        return out[-_HISTORY_ROWS_MAX:], where

    def _history(self, q: dict[str, str]) -> Response:
        now = self.src.clock()
        try:
            since = float(q["since"]) if q.get("since") else now - 3600.0
            until = float(q["until"]) if q.get("until") else None
        except ValueError:
            return _error(400, "since and until are Unix seconds")
        if now - since > _HISTORY_HOURS_MAX * 3600:
            since = now - _HISTORY_HOURS_MAX * 3600
        glob = q.get("glob") or None
        fmt = q.get("format", "json")
        try:
            rows, where = self._intervals(since, until, glob.encode("utf-8") if glob else None)
        except Exception as exc:  # Redis down: say so on the page, not a 500
            logger.warning("console history: %s", exc)
            return _error(503, f"history unavailable: {exc}")
        if fmt == "csv":
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(
                [
                    "key",
                    "hex",
                    "db",
                    "rule",
                    "start",
                    "end",
                    "duration_s",
                    "peak",
                    "instance",
                    "reason",
                ]
            )
            for iv in rows:
                k = show_key(iv.key)
                w.writerow(
                    [
                        _csv_safe(k["key"]),
                        int(k.get("hex", False)),
                        iv.db,
                        iv.rule,
                        f"{iv.start:.3f}",
                        "" if iv.end is None else f"{iv.end:.3f}",
                        "" if iv.duration is None else f"{iv.duration:.3f}",
                        f"{iv.peak:.3f}",
                        iv.instance,
                        iv.reason,
                    ]
                )
            return Response(
                200,
                buf.getvalue().encode("utf-8"),
                "text/csv; charset=utf-8",
                {"Content-Disposition": 'attachment; filename="hotkeyd-history.csv"'},
            )
        if fmt != "json":
            return _error(400, "format is json or csv")
        body = {
            "from": where,
            "since": since,
            "until": until,
            "glob": glob,
            "intervals": [_interval_json(iv) for iv in rows],
        }
        resp = _json(body)
        if q.get("download"):
            resp.headers["Content-Disposition"] = 'attachment; filename="hotkeyd-history.json"'
        return resp

    # -- Health ---------------------------------------------------------------------------
    def health_json(self) -> dict[str, Any]:
        ok, details = self.src.health()
        metrics: list[dict[str, Any]] = []
        for fam in self.src.registry.collect():
            if fam.type in ("histogram", "summary"):
                continue
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                metrics.append({"name": s.name, "labels": dict(s.labels), "value": s.value})
        return {
            "healthy": ok,
            "health": details,
            "components": self.src.components(),
            "metrics": metrics,
            "console": {
                "refused_requests": self.refused,
                "now_builds": self.now_builds,
                "now_build_cpu_seconds": round(self.now_build_cpu, 6),
                "tracked_keys": len(self.src.memory),
                "tracked_keys_dropped": self.src.memory.dropped_keys,
            },
        }


def _top_key(t: dict[str, Any]) -> bytes:
    if t.get("enc") == "base64":
        return base64.b64decode(t["key"])
    return str(t["key"]).encode("utf-8", "surrogatepass")


def _interval_json(iv: Interval) -> dict[str, Any]:
    out = show_key(iv.key)
    out.update(
        id=_key_id(iv.key),
        db=iv.db,
        rule=iv.rule,
        start=round(iv.start, 3),
        end=None if iv.end is None else round(iv.end, 3),
        peak=round(iv.peak, 3),
        instance=iv.instance,
        reason=iv.reason,
    )
    return out


def _csv_safe(text: str) -> str:
    """A key that a spreadsheet would run as a formula gets a leading quote."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
