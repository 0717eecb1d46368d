"""Differential checks of the C parsers against their pure-Python twins.

One function per fuzz target; each takes arbitrary bytes, runs the C implementation and
the twin on the same input, and fails (AssertionError) when they disagree or raise
anything but the documented errors. The fuzzer (``fuzz_parsers.py``, atheris) drives
them with coverage of the twin, whose branches mirror the C code's; the C side runs
under AddressSanitizer and UBSan in ``make asan``/``make fuzz``. ``test_corpus.py`` replays
the kept corpus through the same checks in the normal suite.

Input layout (so a corpus file is a plain byte string): byte 0 picks ``max_line`` / the
sketch's ``max_key_len``, byte 1 where the input is split across two feeds, the rest is
the stream.
"""

from __future__ import annotations

from types import ModuleType

from hotkeyd.sketch import _sketch_py
from hotkeyd.sources.monitor import _monitor_py


def _c_modules() -> tuple[ModuleType, ModuleType]:
    from hotkeyd.sketch import _sketch
    from hotkeyd.sources.monitor import _monitor

    return _monitor, _sketch


def _split(data: bytes) -> tuple[int, int, bytes]:
    if len(data) < 2:
        return 0, 0, data
    return data[0], data[1], data[2:]


def check_monitor(data: bytes) -> None:
    """MONITOR stream -> (lines, replies, malformed, too_long), fed in two pieces."""
    monitor_c, _ = _c_modules()
    knob, cut, stream = _split(data)
    max_line = 64 + knob * 4
    at = len(stream) * cut // 255
    results = []
    for impl in (monitor_c, _monitor_py):
        p = impl.Parser(max_line=max_line)
        got = []
        for piece in (stream[:at], stream[at:]):
            lines, replies, bad, long_ = p.feed_args(piece)
            got.append((lines, replies, bad, long_))
        results.append(got)
    assert results[0] == results[1], (data, results)


def _check_lines(data: bytes, counted: bool) -> None:
    _, sketch_c = _c_modules()
    knob, cut, stream = _split(data)
    max_key_len = 1 + knob % 64
    at = len(stream) * cut // 255
    results = []
    for impl in (sketch_c, _sketch_py):
        s = impl.HeavyKeeper(k=8, width=64, depth=2, seed=7, max_key_len=max_key_len)
        got = [s.update_lines(piece, counted) for piece in (stream[:at], stream[at:])]
        results.append((got, sorted(s.topk())))
    assert results[0] == results[1], (data, results)


def check_update_lines(data: bytes) -> None:
    """Plain key lines into a sketch: (events, oversized, malformed) and the top-k."""
    _check_lines(data, counted=False)


def check_counted(data: bytes) -> None:
    """``key<TAB>count`` lines into a sketch: same comparison."""
    _check_lines(data, counted=True)


def check_decoders(data: bytes) -> None:
    """Every JSON decoder of the contract: a value or the wire error, nothing else escapes
    (spec/vectors/hostile.json); and the strict rule holds in all of them alike."""
    from hotkeyd.client.invalidation import decode_invalidation
    from hotkeyd.protocol import strictjson
    from hotkeyd.protocol.demand import DemandReport
    from hotkeyd.protocol.wire import Message, WireError

    try:
        strictjson.loads(data)
        strict_ok = True
    except strictjson.JSONRejected:
        strict_ok = False
    for decode in (Message.loads, DemandReport.loads, decode_invalidation):
        try:
            decode(data)
        except WireError:
            continue
        assert strict_ok, f"{decode.__qualname__} accepted what the strict rule rejects"


def demand_limits(
    max_rate: float = 1000.0,
) -> tuple[int, int, int, int, int, int, int, int, float, float, float]:
    """The intake's limits tuple for the demand parser (the spec's, and ``max_rate``)."""
    from hotkeyd.protocol import limits, strictjson
    from hotkeyd.protocol.demand import MAX_INTERVAL, MAX_REPORT_BYTES, MIN_INTERVAL

    return (
        MAX_REPORT_BYTES,
        limits.DEMAND_ENTRIES_MAX,
        limits.SEQ_MAX,
        limits.NAME_CHARS_MAX,
        limits.DEMAND_INTERVAL_MS_MAX,
        limits.DB_MAX,
        limits.COUNT_MAX,
        strictjson.MAX_DEPTH,
        max_rate,
        MIN_INTERVAL,
        MAX_INTERVAL,
    )


def check_demand(data: bytes) -> None:
    """Demand reports -> the same verdicts (reason, or every field and merged entry) in
    the C parser and its twin; byte 0 splits the input into two reports of one batch,
    byte 1 picks the per-key cap."""
    from hotkeyd.sources import _demand, _demand_py

    knob, cut, doc = _split(data)
    at = len(doc) * knob // 255
    payloads = [doc, doc[:at], doc[at:], doc]
    lim = demand_limits(float(1 + cut * 40))
    got = [
        [r if len(r) == 7 else r[0] for r in impl.parse(payloads, lim)]
        for impl in (_demand, _demand_py)
    ]
    assert got[0] == got[1], (data, got)


def check_trace(data: bytes) -> None:
    """``ts key [count]`` trace lines: the C splitter and its twin agree on the segments
    and the counts of events and malformed lines (the tick from the first byte)."""
    from hotkeyd.replay import _trace, _trace_py

    knob, _, stream = _split(data)
    tick = (1 + knob) / 64.0
    assert _trace.split_ticks(stream, tick) == _trace_py.split_ticks(stream, tick), data


CHECKS = {
    "demand": check_demand,
    "monitor": check_monitor,
    "trace": check_trace,
    "update_lines": check_update_lines,
    "counted": check_counted,
    "decoders": check_decoders,
}
