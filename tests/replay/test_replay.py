"""Replay finds every known hot interval within one tick at each end, and nothing else."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from hotkeyd.detector import DetectorConfig
from hotkeyd.detector.rules import parse_rules
from hotkeyd.replay import _trace_py, replay
from hotkeyd.replay.trace import TraceStats, read_trace

from .trace_gen import BURSTS, RULES, T0, as_json_lines, as_text, events

TICK = 0.1
EPS = 1e-6


def check_intervals(intervals: list, offset: float = 0.0) -> None:
    expected = sorted((b.expected(), b.key) for b in BURSTS)
    got = sorted(((iv.start, iv.end), iv.key.decode()) for iv in intervals)
    assert [k for _, k in got] == [k for _, k in expected], got
    for ((s, e), key), ((xs, xe), _) in zip(got, expected, strict=True):
        assert e is not None, key
        assert abs(s - xs) <= TICK + EPS, (key, s - T0, xs - T0)
        assert abs(e - xe) <= TICK + EPS, (key, e - T0, xe - T0)


@pytest.fixture(scope="module")
def evs() -> list[tuple[float, str, int]]:
    return events()


@pytest.mark.parametrize("counted", [False, True])
def test_text_trace(evs: list[tuple[float, str, int]], counted: bool) -> None:
    stats = TraceStats()
    data = as_text(evs, counted)
    res = replay(read_trace(io.BytesIO(data), TICK, stats), DetectorConfig(), parse_rules(RULES))
    assert stats.malformed == 0 and res.late == 0
    assert res.events == sum(c for _, _, c in evs)
    check_intervals(res.intervals)
    assert {iv.rule for iv in res.intervals} == {"default"}
    peaks = {iv.key: iv.peak for iv in res.intervals}
    assert peaks[b"cart:7"] == pytest.approx(5000, rel=0.05)


def test_json_lines_with_millisecond_timestamps(evs: list[tuple[float, str, int]]) -> None:
    stats = TraceStats()
    data = as_json_lines(evs) + b'{"time": "soon", "key": "x"}\nnot json\n'
    res = replay(
        read_trace(io.BytesIO(data), TICK, stats, ts_field="time"),
        DetectorConfig(),
        parse_rules(RULES),
    )
    assert stats.malformed == 2
    check_intervals(res.intervals)


def test_the_cli_prints_the_timeline(evs: list[tuple[float, str, int]], tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_bytes(as_text(evs, True))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    run = [sys.executable, "-m", "hotkeyd", "replay", str(trace), "--rules", str(rules)]
    out = subprocess.run([*run, "--json"], capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert sorted(iv["key"] for iv in doc["intervals"]) == sorted(b.key for b in BURSTS)
    # a time range: only what was hot in [T0+10, T0+13) is seen, and it starts fresh
    out = subprocess.run(
        [*run, "--json", "--from", str(T0 + 10), "--to", str(T0 + 13)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(iv["key"] for iv in json.loads(out)["intervals"]) == ["item:1", "user:x"]
    table = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "cart:7" in table and "M events/s" in table
    bad = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "replay", str(tmp_path / "missing.txt")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr


def test_native_and_twin_split_alike() -> None:
    try:
        from hotkeyd.replay import _trace
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the native trace splitter did not build")
        pytest.skip("native trace splitter not built")

    rng = random.Random(3)
    pieces = [
        b"1764470000.05 a\n",
        b"1764470000050 b 3\n",
        b"1764470000.1\tc\t2\r\n",
        b"\n",
        b"x y\n",
        b" 1764470000 lead\n",
        b"1764470000 k 0\n",
        b"1764470000 k 99999999999\n",
        b"1e9 sci\n",
        b"-5 neg\n",
        b"1764470000.25 k 7 extra\n",
        b"1764470001.123456789012345 long\n",
        b"1764470000. dot\n",
        b"1764470002 trailing \t\n",
    ]
    for _ in range(300):
        buf = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        for tick in (0.1, 0.01, 1.0):
            assert _trace.split_ticks(buf, tick) == _trace_py.split_ticks(buf, tick), buf
    with pytest.raises(ValueError):
        _trace.split_ticks(b"", 0.0)
    with pytest.raises(TypeError):
        _trace.split_ticks("text", 0.1)
