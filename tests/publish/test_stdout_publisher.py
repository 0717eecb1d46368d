"""StdoutPublisher: JSON lines that round-trip through wire.Message.loads."""

from __future__ import annotations

import io
import json

from hotkeyd.clock import ManualClock
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message
from hotkeyd.publish import StdoutPublisher
from tests.publish.conftest import sample

BINARY = b'\x80\x81 not utf-8 "q"\n'


def hot(key: bytes, rate: float = 1.0) -> HotEntry:
    return HotEntry(key=key, rate=rate, rule="default", ttl_ms=2000, since=5.0, kind="read")


def _lines(data: str) -> list[Message]:
    assert data.endswith("\n")
    return [Message.loads(line) for line in data.splitlines()]


def test_text_stream_lines_round_trip() -> None:
    out = io.StringIO()
    metrics = Metrics()
    clock = ManualClock()
    pub = StdoutPublisher(out, "cli-1", clock, metrics)
    pub.start()
    pub.publish([hot(b"a", 10.0), hot(BINARY, 20.0)], [], [])
    clock.advance(1.0)
    pub.publish([], [], [])  # no change, no line
    pub.publish([], [hot(b"a", 11.0)], [CoolEntry(BINARY, "default")])
    pub.publish([], [hot("ü".encode())], [], final=True)
    pub.close()
    msgs = _lines(out.getvalue())
    assert [m.seq for m in msgs] == [1, 2, 3]
    assert {e.key for e in msgs[0].hot} == {b"a", BINARY}
    assert msgs[1].cool == (CoolEntry(BINARY, "default"),)
    assert msgs[1].ts == msgs[0].ts + 1.0
    assert msgs[2].final and msgs[2].hot[0].key == "ü".encode()
    # each line is exactly the channel JSON
    assert out.getvalue().splitlines()[0].encode() == msgs[0].dumps()
    assert sample(metrics, "hotkeyd_publish_notifications_total", publisher="stdout") == 3
    assert pub.healthy is False  # closed


def test_binary_stream_and_full_on_start() -> None:
    out = io.BytesIO()
    pub = StdoutPublisher(out, "cli-2", ManualClock(), full_on_start=True)
    pub.start()
    pub.publish([hot(b"k")], [], [], full=True)
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["full"] for line in lines] == [True, True]
    assert Message.loads(lines[1]).hot[0].key == b"k"


def test_ascii_only_text_stream_still_gets_valid_json() -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    pub = StdoutPublisher(out, "cli-3", ManualClock())
    pub.publish([hot("ключ".encode())], [], [])
    out.flush()
    (msg,) = _lines(raw.getvalue().decode("ascii"))
    assert msg.hot[0].key == "ключ".encode()


class _Broken(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_write_failure_is_counted_not_raised() -> None:
    metrics = Metrics()
    pub = StdoutPublisher(_Broken(), "cli-4", ManualClock(), metrics)
    for _ in range(5):
        pub.publish([hot(b"a")], [], [])
    assert not pub.healthy
    assert pub.last_error is not None and "Broken pipe" in pub.last_error
    assert sample(metrics, "hotkeyd_publish_failures_total", publisher="stdout") == 5
    assert sample(metrics, "hotkeyd_publish_notifications_total", publisher="stdout") == 0
