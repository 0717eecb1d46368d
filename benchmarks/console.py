"""The web console with 1,000 hot keys: page weight, refresh cost, and the daemon's CPU.

Runs one real daemon (stdin source, no Redis; a rules file with a threshold of 20/s) fed
1,000 keys at 50/s each, so all 1,000 are hot at once, and measures in the same run:

* page weight: bytes of the page, its script and style, and of one ``/api/now``;
* refresh cost: the page records ``performance.now`` around each Now refresh (parsing the
  document and updating the 1,000-row table; and until the next frame, style and layout
  included) in ``window.__hotkeydPerf``; headless Chromium runs in real time, driven over
  the DevTools protocol (:mod:`hotkeyd.testing.browser`), and the ring is read back;
* the daemon's CPU with one console open vs. without: user+sys seconds of the daemon
  process over alternating equal phases of the same feed (off, on, off, on), as a ratio
  and as % of one core.

    python benchmarks/console.py [--seconds 8] [--out benchmarks/results/console.txt]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from hotkeyd.testing import DaemonProcess
from hotkeyd.testing.browser import Chromium

N_KEYS = 1000
RATE = 50.0  # per key per second, above the rules' threshold of 20/s
RULES = "[default]\nthreshold = 20\ncooldown = 10.0\n"


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _renderers_cpu(browser_pid: int) -> float:
    """CPU seconds of Chromium's renderer processes (the tab's parse, script, style,
    layout and paint): CPU time, so a loaded machine does not stretch it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0.0, [browser_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                renderer = b"--type=renderer" in f.read()
            if renderer:
                total += _cpu(pid)
        except OSError:
            continue
    return total


def _console_cpu(d: DaemonProcess) -> tuple[int, float]:
    c = json.loads(d.get("/api/health"))["console"]
    return int(c["now_builds"]), float(c["now_build_cpu_seconds"])


def _size(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        return len(r.read())


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.1f} ms, p99 {_pct(values, 0.99):.1f} ms, "
        f"max {max(values):.1f} ms over {len(values)} refreshes"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each CPU phase")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args(argv)
    keys = {f"item:{i:04d}".encode(): RATE for i in range(N_KEYS)}
    load0 = os.getloadavg()[0]
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.toml"
        rules.write_text(RULES)
        with DaemonProcess(
            "--window", "1", "--rules", str(rules), "--max-hot", str(2 * N_KEYS),
            "--k", str(2 * N_KEYS), "--memory", str(8 << 20),
        ) as d, Chromium() as browser:  # fmt: skip
            assert d.proc is not None
            pid = d.proc.pid
            d.discard_stdout()  # the stdout publisher's lines
            d.feed_rate(keys, 3.0)
            hot = int(json.loads(d.get("/api/now"))["hot_count"])
            weight = {
                p: _size(d.url(p))
                for p in ("/", "/static/console.js", "/static/console.css", "/api/now")
            }
            cpu = {"off": 0.0, "on": 0.0}
            wall = {"off": 0.0, "on": 0.0}
            page = None
            first = rows_shown = 0
            script_ms: list[float] = []
            frame_ms: list[float] = []
            build_ms: list[float] = []  # the refresh that first built the 1,000 rows
            renderer_cpu = build_cpu = 0.0
            builds = 0
            flash = b"flash:new"  # turns hot during the last phase, the page open
            flash_id = base64.urlsafe_b64encode(flash).decode().rstrip("=") + "/0"
            for n_phase, phase in enumerate(("off", "on", "off", "on")):
                if phase == "on" and page is None:
                    page = browser.page(d.url("/#/now"))
                    page.wait_for(f"window.__hotkeydPerf && __hotkeydPerf.rows >= {N_KEYS}", 20)
                    first = int(page.eval("__hotkeydPerf.renders"))
                    build_ms.append(float(page.eval(f"__hotkeydPerf.ms[{first - 1}]")))
                elif phase == "off" and page is not None:
                    page.close()
                    page = None
                c0, t0, r0, (b0, bc0) = (
                    _cpu(pid),
                    time.monotonic(),
                    _renderers_cpu(browser.pid),
                    _console_cpu(d),
                )
                d.feed_rate({**keys, flash: 10 * RATE} if n_phase == 3 else keys, args.seconds)
                cpu[phase] += _cpu(pid) - c0
                wall[phase] += time.monotonic() - t0
                b1, bc1 = _console_cpu(d)
                if phase == "on":
                    renderer_cpu += _renderers_cpu(browser.pid) - r0
                    builds += b1 - b0
                    build_cpu += bc1 - bc0
                if page is not None:  # read back before the tab closes
                    perf = page.eval(
                        "({renders: __hotkeydPerf.renders, ms: __hotkeydPerf.ms,"
                        " frame: __hotkeydPerf.frameMs, rows: __hotkeydPerf.rows,"
                        " dom: document.querySelectorAll('#now-rows > div').length})"
                    )
                    n = perf["renders"]
                    ring = len(perf["ms"])
                    script_ms += [perf["ms"][i % ring] for i in range(max(first, n - ring), n)]
                    frame = perf["frame"]  # the last one's frame may not have come yet
                    frame_ms += [
                        frame[i % ring]
                        for i in range(max(first, n - ring), n)
                        if i % ring < len(frame) and frame[i % ring] is not None
                    ]
                    rows_shown = perf["dom"]
                    first = n
            assert page is not None
            shown = page.eval(f"__hotkeydPerf.shownAt.get({flash_id!r})") / 1000.0
            rows = json.loads(d.get("/api/now"))["rows"]
            announced = next(r["since"] for r in rows if r["key"] == flash.decode())
            # the same refreshes with the table not displayed: the renderer's CPU is then
            # the fetch, the parse and the script alone (what performance.now times)
            page.eval("document.getElementById('now-table').style.display = 'none'")
            r0, n0 = _renderers_cpu(browser.pid), int(page.eval("__hotkeydPerf.renders"))
            d.feed_rate(keys, args.seconds)
            script_cpu = _renderers_cpu(browser.pid) - r0
            script_n = max(1, int(page.eval("__hotkeydPerf.renders")) - n0)
            page.close()
    say(f"console benchmark: {N_KEYS} keys fed at {RATE:.0f}/s each (threshold 20/s)")
    say(
        f"machine: {os.cpu_count()} cores, load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (times in the page are wall-clock: a loaded "
        "machine stretches them)"
    )
    say(f"hot keys: {hot}; rows in the Now table: {rows_shown}")
    say("page weight (bytes): " + ", ".join(f"{k} {v:,}" for k, v in weight.items()))
    say(
        f"refresh script time (parse + table update, performance.now): {_summary(script_ms)}"
        " (budget 50 ms)"
    )
    say(
        "first refresh of a new tab (creates the 1,000 rows): "
        + ", ".join(f"{v:.1f} ms" for v in build_ms)
    )
    if frame_ms:
        say(f"refresh to next frame (style, layout, paint included): {_summary(frame_ms)}")
    say(
        f"a new hot key on the page {shown - announced:.2f} s after its announcement"
        f" (the 1,000 rows shown; budget 2 s)"
    )
    n_refresh = max(1, len(script_ms))
    say(
        f"renderer CPU per refresh (all of it: parse, script, style, layout, paint; CPU time,"
        f" not stretched by load): {1000 * renderer_cpu / n_refresh:.1f} ms"
    )
    say(
        f"renderer CPU per refresh with the table not displayed (fetch, parse and script"
        f" only): {1000 * script_cpu / script_n:.1f} ms"
    )
    say(
        f"daemon: {builds} Now documents built with the console open, "
        f"{1000 * build_cpu / max(builds, 1):.1f} ms CPU each (thread time), "
        f"{100 * build_cpu / wall['on']:.1f} % of a core"
    )
    secs = wall["on"] / max(1e-9, len(script_ms))
    say(f"refreshes: one per {secs:.2f} s with the console open")
    ratio = cpu["on"] / max(cpu["off"], 1e-9)
    extra = 100.0 * (cpu["on"] / wall["on"] - cpu["off"] / wall["off"])
    say(
        f"daemon CPU: {cpu['off']:.2f} s without a console over {wall['off']:.1f} s, "
        f"{cpu['on']:.2f} s with one over {wall['on']:.1f} s; ratio {ratio:.3f}, "
        f"{extra:+.1f} % of a core (budget +5 %)"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
