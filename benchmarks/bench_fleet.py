"""Demand reports from a whole fleet (issue 27): reports/s sent, counted, shed, daemon CPU.

    python benchmarks/bench_fleet.py                          # 2,500 apps, 20 s, this build
    python benchmarks/bench_fleet.py --apps 1000 2500 --signed
    python benchmarks/bench_fleet.py --baseline ../hotkeyd-main   # and main's build, same run

A real ``hotkeyd run`` (stdin source, ``--demand-reports``) and a real redis-server.
The fleet's keys are made hot first (lines on stdin above the threshold); from then on
only the reported demand keeps them hot, as in production. ``--procs`` publisher
processes each play a share of the apps: every app sends one report per 250 ms with
``--entries`` entries of 30-byte keys, byte for byte what the SDK's reporter sends
(:class:`hotkeyd.testing.fleet.FleetApp`), signed with a reporter key with ``--signed``.

Per run: reports/s sent (PUBLISHes that reached a subscriber), counted
(``hotkeyd_demand_reports_total``), shed (``hotkeyd_demand_reports_dropped_total``, by
reason), lost without a counter (sent - counted - shed), the daemon's CPU (share of one
core, from /proc) and /healthz at the end. ``--baseline DIR`` runs the daemon of another
source tree (e.g. ``git worktree add ../hotkeyd-main main`` and ``setup.py build_ext
--inplace`` there) with the same fleet, alternating with this build.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import DaemonProcess, RedisServer
from hotkeyd.testing.fleet import fleet_keys, make_fleet

REPORTER_KEY = b"bench-fleet-reporter-key-0123456789"
INTERVAL = 0.25
SLICES = 10  # each process sends its apps in 10 slices per interval (no 250 ms bursts)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publisher(
    url: str,
    channel: str,
    first: int,
    count: int,
    apps: int,
    entries: int,
    pool: int,
    signed: bool,
    start_at: float,
    seconds: float,
    out: Any,
) -> None:
    """Play apps [first, first + count) of the fleet until start_at + seconds."""
    auth = MessageAuth([REPORTER_KEY]) if signed else None
    fleet = make_fleet(apps, fleet_keys(pool), entries=entries, auth=auth)[first : first + count]
    r = redis.Redis.from_url(url)
    slices = [fleet[i::SLICES] for i in range(SLICES)]
    sent = reached = 0
    step = INTERVAL / SLICES
    time.sleep(max(0.0, start_at - time.time()))
    t = start_at
    end = start_at + seconds
    while t < end:
        for part in slices:
            pipe = r.pipeline(transaction=False)
            now = time.time()
            for app in part:
                pipe.publish(channel, app.report(now))
            got = pipe.execute()
            sent += len(got)
            reached += sum(got)
            t += step
            time.sleep(max(0.0, t - time.time()))
    out.put((sent, reached))


def run_once(args: argparse.Namespace, apps: int, tree: str | None) -> dict[str, Any]:
    ns = Namespace(f"fleet{os.getpid()}")
    channel = ns.demand_channel("d1")
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    (tmp / "rules.toml").write_text("[default]\nthreshold = 20\nttl = 2.0\ncooldown = 1.0\n")
    daemon_args = ["-s", "-", "--namespace", ns.prefix, "--instance", "d1"]
    daemon_args += ["--rules", str(tmp / "rules.toml"), "--window", "1.0"]
    daemon_args += ["--max-hot", str(max(1000, args.pool * 2))]
    if args.signed:
        (tmp / "demand.key").write_bytes(REPORTER_KEY + b"\n")
        daemon_args += ["--demand-key-file", str(tmp / "demand.key")]
    env = {"PYTHONPATH": tree} if tree else {}
    with RedisServer() as rs:
        r = redis.Redis.from_url(rs.url)
        daemon = DaemonProcess(
            "--redis-url", rs.url, *daemon_args, env=env, cwd=tree, log_level="warning"
        )
        with daemon:
            deadline = time.monotonic() + 20
            while r.pubsub_numsub(channel)[0][1] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            keys = fleet_keys(args.pool)
            daemon.feed_rate({k: 60.0 for k in keys}, 2.0)  # the keys turn hot
            hot_before = daemon.metric("hotkeyd_keys_hot")
            q: Any = mp.Queue()
            per = -(-apps // args.procs)
            start_at = time.time() + 1.0
            procs = [
                mp.Process(
                    target=publisher,
                    args=(
                        rs.url,
                        channel,
                        i * per,
                        min(per, apps - i * per),
                        apps,
                        args.entries,
                        args.pool,
                        args.signed,
                        start_at,
                        args.seconds,
                        q,
                    ),
                )
                for i in range(args.procs)
                if i * per < apps
            ]
            for p in procs:
                p.start()
            time.sleep(max(0.0, start_at - time.time()) + 0.5)  # past the first reports
            assert daemon.proc is not None
            c0, w0 = cpu_seconds(daemon.proc.pid), time.monotonic()
            counted0 = daemon.metric("hotkeyd_demand_reports_total")
            time.sleep(args.seconds - 1.0)
            c1, w1 = cpu_seconds(daemon.proc.pid), time.monotonic()
            counted1 = daemon.metric("hotkeyd_demand_reports_total")
            results = [q.get(timeout=60) for _ in procs]
            for p in procs:
                p.join(30)
            time.sleep(1.5)  # what is queued gets counted
            sent = sum(s for s, _ in results)
            reached = sum(x for _, x in results)
            counted = daemon.metric("hotkeyd_demand_reports_total")
            shed: dict[str, float] = {}
            for line in daemon.metrics().splitlines():
                if line.startswith("hotkeyd_demand_reports_dropped_total{"):
                    reason = line.split('reason="', 1)[1].split('"', 1)[0]
                    shed[reason] = float(line.rsplit(" ", 1)[1])
            health = daemon.health()
            hot_after = daemon.metric("hotkeyd_keys_hot")
    return {
        "build": "baseline" if tree else "this",
        "apps": apps,
        "signed": args.signed,
        "sent": sent,
        "reached": reached,
        "counted": counted,
        "shed": {k: v for k, v in shed.items() if v},
        "lost_silently": max(0.0, reached - counted - sum(shed.values())),
        "counted_per_s": (counted1 - counted0) / (w1 - w0),
        "sent_per_s": sent / args.seconds,
        "daemon_cpu": (c1 - c0) / (w1 - w0),
        "counted_per_cpu_s": (counted1 - counted0) / max(1e-9, c1 - c0),
        "health": health,
        "hot": (hot_before, hot_after),
    }


def capacity(args: argparse.Namespace) -> None:
    """The intake alone, in this process: reports per CPU second through MAC check,
    parsing, freshness, seq window, budgets, queue and drain; C core vs its twin."""
    from hotkeyd.metrics import Metrics
    from hotkeyd.sources import _demand, _demand_py
    from hotkeyd.sources import demand as intake_mod

    auth = MessageAuth([REPORTER_KEY]) if args.signed else None
    fleet = make_fleet(2500, fleet_keys(args.pool), entries=args.entries, auth=auth)
    rates: dict[str, list[float]] = {"C core": [], "pure twin": []}
    for _ in range(args.repeats):
        for name, impl in (("C core", _demand), ("pure twin", _demand_py)):
            intake_mod._impl = impl
            intake = intake_mod.DemandIntake(
                "redis://127.0.0.1:1",
                Namespace("cap"),
                "d1",
                metrics=Metrics(),
                auth=auth,
                max_pending=10**9,
                app_budget=1e15,
                max_age=1e9,  # the twin takes seconds per round: no report goes stale
            )
            rounds = 4 if impl is _demand else 1
            cpu = 0.0
            for _ in range(rounds):
                now = time.time()
                batch = [app.report(now) for app in fleet]
                t = time.process_time()
                for i in range(0, len(batch), 1024):
                    intake.feed_many(batch[i : i + 1024])
                while intake.drain():
                    pass
                cpu += time.process_time() - t
            rates[name].append(rounds * len(fleet) / cpu)
    intake_mod._impl = _demand
    c, py = statistics.median(rates["C core"]), statistics.median(rates["pure twin"])
    print(
        f"intake capacity ({args.entries} entries of 30-byte keys, signed={args.signed}, "
        f"median of {args.repeats}): C core {c:,.0f} reports per CPU second, pure twin "
        f"{py:,.0f} ({c / py:.1f}x)"
    )
    if not args.signed:
        full = statistics.median(capacity_with_detector(args) for _ in range(args.repeats))
        print(
            f"with the detector (hot-key filter, sketch updates, served counts, ticks): "
            f"C core {full:,.0f} reports per CPU second"
        )


def capacity_with_detector(args: argparse.Namespace) -> float:
    """The intake and the detector's side (hot-key filter, sketch updates, served
    counts, ticks) in this process on a manual clock: reports per CPU second."""
    from hotkeyd.batch import Batch
    from hotkeyd.clock import ManualClock
    from hotkeyd.detector.config import DetectorConfig
    from hotkeyd.detector.detector import Detector
    from hotkeyd.detector.rules import parse_rules
    from hotkeyd.metrics import Metrics
    from hotkeyd.sources.demand import DemandIntake

    clock = ManualClock(start=1000.0, epoch=time.time())
    keys = fleet_keys(args.pool)
    rules = parse_rules("[default]\nthreshold = 20\n")
    det = Detector(DetectorConfig(window=1.0, tick=0.1, max_hot=2000), rules, clock)
    for _ in range(12):  # the fleet's keys turn hot
        det.ingest(Batch(keys=keys * 10, source="warm"))
        clock.advance(0.1)
        det.tick()
    intake = DemandIntake(
        "redis://127.0.0.1:1",
        Namespace("cap"),
        "d1",
        metrics=Metrics(),
        clock=clock,
        max_pending=10**9,
        max_age=1e9,
    )
    fleet = make_fleet(2500, keys, entries=args.entries)
    cpu = 0.0
    rounds = 8
    for _ in range(rounds):
        batch = [app.report(clock.time()) for app in fleet]
        t = time.process_time()
        for i in range(0, len(batch), 250):  # 2,500 apps: 250 reports per 25 ms
            intake.feed_many(batch[i : i + 250])
            while items := intake.drain():
                for db, k, c in items:
                    det.ingest_served(k, c, db)
            clock.advance(0.025)
            if det.due() <= 0:
                det.tick()
        cpu += time.process_time() - t
    return rounds * len(fleet) / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--apps", type=int, nargs="+", default=[2500])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--procs", type=int, default=3, help="publisher processes")
    ap.add_argument("--entries", type=int, default=100)
    ap.add_argument("--pool", type=int, default=500, help="distinct hot keys of the fleet")
    ap.add_argument("--signed", action="store_true", help="reports signed, daemon requires it")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--baseline", help="source tree of the build to compare (e.g. main)")
    ap.add_argument("--json", help="also write the runs here")
    ap.add_argument("--capacity", action="store_true", help="only the in-process intake")
    args = ap.parse_args()
    if args.capacity:
        capacity(args)
        return
    trees: list[str | None] = [None] + (
        [str(Path(args.baseline).resolve())] if args.baseline else []
    )
    runs = []
    print(
        f"fleet: {args.entries} entries of 30-byte keys per report, one per 250 ms per app; "
        f"{args.procs} publisher processes; signed={args.signed}; {args.seconds:.0f} s per run"
    )
    print(
        f"{'build':9} {'apps':>5} {'sent/s':>8} {'counted/s':>10} {'counted':>8} "
        f"{'lost':>6} {'cpu':>5} {'per cpu-s':>9}  health    shed"
    )
    for apps in args.apps:
        for _ in range(args.repeats):
            for tree in trees:  # interleaved: this build, then the baseline
                res = run_once(args, apps, tree)
                runs.append(res)
                print(
                    f"{res['build']:9} {apps:5d} {res['sent_per_s']:8.0f} "
                    f"{res['counted_per_s']:10.0f} {res['counted'] / max(1, res['reached']):8.1%} "
                    f"{res['lost_silently']:6.0f} {res['daemon_cpu']:5.0%} "
                    f"{res['counted_per_cpu_s']:9.0f}  {res['health']:9} "
                    f"{json.dumps(res['shed'])}",
                    flush=True,
                )
    if args.repeats > 1:
        for apps in args.apps:
            for build in {r["build"] for r in runs}:
                sel = [r for r in runs if r["apps"] == apps and r["build"] == build]
                print(
                    f"median {build} {apps}: counted/s "
                    f"{statistics.median(r['counted_per_s'] for r in sel):.0f}, cpu "
                    f"{statistics.median(r['daemon_cpu'] for r in sel):.0%}"
                )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
