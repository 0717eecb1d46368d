"""StreamSource on real files and pipes: whole-line batches, bounded memory, tail -F.

Every test reads through the real reader thread; files live in ``tmp_path`` and are
grown, rotated and truncated the way log writers and logrotate do it.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hotkeyd.batch import Batch
from hotkeyd.errors import SourceError
from hotkeyd.metrics import Metrics
from hotkeyd.sketch import new_sketch
from hotkeyd.sources.stream import StreamSource

MIB = 1 << 20


def _source(path: Path | str, metrics: Metrics | None = None, **kw: object) -> StreamSource:
    kw.setdefault("poll_interval", 0.02)
    return StreamSource(str(path), metrics=metrics or Metrics(), **kw)  # type: ignore[arg-type]


@pytest.fixture
def opened() -> Iterator[list[StreamSource]]:
    """Sources a test started; closed at the end whatever happened."""
    started: list[StreamSource] = []
    yield started
    for s in started:
        s.close()


def _start(opened: list[StreamSource], src: StreamSource) -> StreamSource:
    src.start()
    opened.append(src)
    return src


def _drain(src: StreamSource, timeout: float = 20.0) -> list[Batch]:
    """Every batch until the source is exhausted."""
    out: list[Batch] = []
    deadline = time.monotonic() + timeout
    while not src.exhausted:
        assert time.monotonic() < deadline, "source never ended"
        out.extend(src.next_batch(0.1))
    return out


def _lines(batches: list[Batch]) -> collections.Counter[bytes]:
    c: collections.Counter[bytes] = collections.Counter()
    for b in batches:
        assert b.lines is not None
        c.update(line for line in bytes(b.lines).split(b"\n") if line)
    return c


def _collect_until(
    src: StreamSource,
    into: list[Batch],
    pred: Callable[[collections.Counter[bytes]], bool],
    timeout: float = 10.0,
) -> collections.Counter[bytes]:
    deadline = time.monotonic() + timeout
    got = _lines(into)
    while not pred(got) and time.monotonic() < deadline:
        batch = src.next_batch(0.05)
        into.extend(batch)
        if batch:
            got = _lines(into)
    return got


def _keys(prefix: str, n: int) -> bytes:
    return b"".join(b"%s:%d\n" % (prefix.encode(), i) for i in range(n))


def _malformed(m: Metrics, source: str, reason: str) -> float:
    v = m.registry.get_sample_value(
        "hotkeyd_source_malformed_total", {"source": source, "reason": reason}
    )
    return v or 0.0


# -- batches ------------------------------------------------------------------------------
def test_file_batches_hold_whole_lines_and_every_byte(
    tmp_path: Path, opened: list[StreamSource]
) -> None:
    # ~3 MiB of lines of many lengths: several 1 MiB reads, each cut mid-line.
    body = b"".join(b"k%d:%s\n" % (i, b"x" * (i % 300)) for i in range(20000))
    path = tmp_path / "keys.log"
    path.write_bytes(body)
    batches = _drain(_start(opened, _source(path)))
    assert len(batches) >= 3
    assert all(bytes(b.lines or b"").endswith(b"\n") for b in batches)
    assert b"".join(bytes(b.lines or b"") for b in batches) == body
    assert all(b.source == "file" and not b.counted for b in batches)


def test_pipe_written_in_odd_pieces_still_gives_whole_lines(opened: list[StreamSource]) -> None:
    body = b"".join(b"key:%d\n" % (i * 7919 % 1000) for i in range(50000))
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb", buffering=0) as out:
            for i in range(0, len(body), 4099):  # never aligned with a line end
                out.write(body[i : i + 4099])

    with os.fdopen(r, "rb") as stream:
        writer = threading.Thread(target=write)
        writer.start()
        src = _start(opened, _source("-", stream=stream))
        batches = _drain(src)
        writer.join()
    assert all(bytes(b.lines or b"").endswith(b"\n") for b in batches)
    assert b"".join(bytes(b.lines or b"") for b in batches) == body


def test_final_line_without_newline_counts(tmp_path: Path, opened: list[StreamSource]) -> None:
    path = tmp_path / "keys.log"
    path.write_bytes(b"a\nb\nlast")
    batches = _drain(_start(opened, _source(path)))
    assert _lines(batches) == {b"a": 1, b"b": 1, b"last": 1}
    assert bytes(batches[-1].lines or b"").endswith(b"last")


def test_crlf_lines_count_as_their_keys(tmp_path: Path, opened: list[StreamSource]) -> None:
    path = tmp_path / "keys.log"
    path.write_bytes(b"hot\r\n" * 300 + b"cold\r\n" * 5 + b"tail\r\n")
    sketch = new_sketch("heavykeeper", k=8)
    for b in _drain(_start(opened, _source(path))):
        sketch.update_lines(b.lines, b.counted)
    top = dict(sketch.topk())
    assert top[b"hot"] == 300 and top[b"cold"] == 5 and top[b"tail"] == 1
    assert not any(k.endswith(b"\r") for k in top)


def test_counted_lines_are_flagged(tmp_path: Path, opened: list[StreamSource]) -> None:
    path = tmp_path / "counted.log"
    path.write_bytes(b"a\t5\nb\t2\na\t1\n")
    sketch = new_sketch("heavykeeper", k=8)
    batches = _drain(_start(opened, _source(path, counted=True)))
    assert batches and all(b.counted for b in batches)
    for b in batches:
        sketch.update_lines(b.lines, b.counted)
    assert dict(sketch.topk()) == {b"a": 6, b"b": 2}


# -- oversized lines ----------------------------------------------------------------------
def test_megabytes_without_newline_are_skipped_as_they_stream(opened: list[StreamSource]) -> None:
    """48 MiB with no newline: counted once as oversized, never buffered whole."""
    block = b"x" * 65536
    huge = 48 * MIB
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb", buffering=0) as out:
            out.write(b"before\n")
            for _ in range(huge // len(block)):
                out.write(block)
            out.write(b"\nafter\n" + b"bg\n" * 10)

    m = Metrics()
    tracemalloc.start()
    try:
        with os.fdopen(r, "rb") as stream:
            writer = threading.Thread(target=write)
            writer.start()
            src = _start(opened, _source("-", m, stream=stream, max_line=1056))
            batches = _drain(src, timeout=60)
            writer.join()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _lines(batches) == {b"before": 1, b"after": 1, b"bg": 10}
    assert _malformed(m, "stdin", "oversized") == 1
    # The reader holds one read chunk (1 MiB) plus at most max_line of carry-over.
    assert max(len(b.lines or b"") for b in batches) <= 2 * MIB
    assert peak < 8 * MIB, f"peak traced memory {peak / MIB:.1f} MiB for a 48 MiB line"


def test_oversized_line_in_a_file_is_counted_with_source_file(
    tmp_path: Path, opened: list[StreamSource]
) -> None:
    path = tmp_path / "keys.log"
    path.write_bytes(b"a\n" + b"y" * (3 * MIB) + b"\nb\n" + b"z" * 5000)  # two oversized
    m = Metrics()
    batches = _drain(_start(opened, _source(path, m, max_line=1056)))
    assert _lines(batches) == {b"a": 1, b"b": 1}
    assert _malformed(m, "file", "oversized") == 2


# -- follow (tail -F) ---------------------------------------------------------------------
def test_follow_picks_up_appended_lines(tmp_path: Path, opened: list[StreamSource]) -> None:
    path = tmp_path / "app.log"
    path.write_bytes(_keys("old", 50))
    src = _start(opened, _source(path, follow=True))
    got: list[Batch] = []
    assert len(_collect_until(src, got, lambda c: len(c) == 50)) == 50
    with path.open("ab") as f:
        f.write(b"new:1\nnew:")  # a half-written line waits for its end
        f.flush()
        assert _collect_until(src, got, lambda c: b"new:1" in c)[b"new:1"] == 1
        f.write(b"2\n")
    c = _collect_until(src, got, lambda c: b"new:2" in c)
    assert c[b"new:2"] == 1 and b"new:" not in c
    assert not src.exhausted


def test_follow_rotation_continues_on_the_new_file_without_losing_lines(
    tmp_path: Path, opened: list[StreamSource]
) -> None:
    path = tmp_path / "app.log"
    writer = path.open("ab")
    writer.write(_keys("a", 100))
    writer.flush()
    src = _start(opened, _source(path, follow=True))
    got: list[Batch] = []
    _collect_until(src, got, lambda c: len(c) == 100)
    # logrotate's "create": rename, the app writes a bit more to the old file, then reopens.
    path.rename(tmp_path / "app.log.1")
    writer.write(_keys("b", 100))
    writer.flush()
    writer.close()
    path.write_bytes(_keys("c", 100))
    c = _collect_until(src, got, lambda c: len(c) == 300)
    assert c == collections.Counter(
        {k: 1 for k in (_keys("a", 100) + _keys("b", 100) + _keys("c", 100)).split()}
    )
    # ... and keeps following the new file.
    with path.open("ab") as f:
        f.write(b"d:0\n")
    assert _collect_until(src, got, lambda c: b"d:0" in c)[b"d:0"] == 1


def test_follow_truncation_reads_again_from_the_start(
    tmp_path: Path, opened: list[StreamSource]
) -> None:
    path = tmp_path / "app.log"
    writer = path.open("ab")  # O_APPEND, as loggers open their files
    writer.write(_keys("before", 200))
    writer.flush()
    src = _start(opened, _source(path, follow=True))
    got: list[Batch] = []
    _collect_until(src, got, lambda c: len(c) == 200)
    os.truncate(path, 0)  # copytruncate
    time.sleep(0.2)  # the reader notices the shrink before the writer goes on
    writer.write(b"after:0\nafter:1\n")
    writer.flush()
    c = _collect_until(src, got, lambda c: b"after:1" in c)
    writer.close()
    assert c[b"after:0"] == 1 and c[b"after:1"] == 1
    assert sum(c.values()) == 202  # nothing read twice, nothing lost


def test_follow_waits_for_a_missing_file_then_follows_it_through_rotation(
    tmp_path: Path, opened: list[StreamSource], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "later" / "app.log"  # not even the directory exists yet
    caplog.set_level(logging.INFO, logger="hotkeyd.sources.stream")
    src = _start(opened, _source(path, follow=True))
    got: list[Batch] = []
    assert src.next_batch(0.3) == [] and not src.exhausted
    path.parent.mkdir()
    path.write_bytes(_keys("first", 20))
    _collect_until(src, got, lambda c: len(c) == 20)
    path.rename(path.with_suffix(".1"))
    time.sleep(0.2)  # gone for a while: the source keeps waiting, it does not end
    assert not src.exhausted
    path.write_bytes(_keys("second", 20))
    c = _collect_until(src, got, lambda c: len(c) == 40)
    assert len(c) == 40 and sum(c.values()) == 40
    waiting = [r for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(waiting) == 1 and str(path) in waiting[0].getMessage()
    assert src.error is None


# -- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("follow", [False, True])
def test_directory_path_fails_start(tmp_path: Path, follow: bool) -> None:
    src = _source(tmp_path, follow=follow)
    with pytest.raises(SourceError, match="directory") as info:
        src.start()
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
    src.close()


def test_missing_file_without_follow_fails_start(tmp_path: Path) -> None:
    src = _source(tmp_path / "nope.log")
    with pytest.raises(SourceError, match="not found"):
        src.start()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
@pytest.mark.parametrize("follow", [False, True])
def test_unreadable_file_fails_start(tmp_path: Path, follow: bool) -> None:
    path = tmp_path / "secret.log"
    path.write_bytes(b"a\n")
    path.chmod(0)
    with pytest.raises(SourceError, match="permission denied"):
        _source(path, follow=follow).start()


def test_read_error_mid_stream_is_kept_in_error(opened: list[StreamSource]) -> None:
    """/proc/self/mem opens fine and fails on read (EIO): a real mid-stream read error."""
    m = Metrics()
    src = _start(opened, _source("/proc/self/mem", m))
    assert _drain(src) == []
    assert isinstance(src.error, SourceError)
    assert "/proc/self/mem" in str(src.error) and isinstance(src.error.__cause__, OSError)
    errors = m.registry.get_sample_value(
        "hotkeyd_source_errors_total", {"source": "file", "kind": "read"}
    )
    assert errors == 1


def test_clean_end_has_no_error(tmp_path: Path, opened: list[StreamSource]) -> None:
    path = tmp_path / "keys.log"
    path.write_bytes(b"a\n")
    src = _start(opened, _source(path))
    _drain(src)
    assert src.exhausted and src.error is None


def test_close_stops_a_follow_reader_promptly(tmp_path: Path) -> None:
    src = _source(tmp_path / "never.log", follow=True)
    src.start()
    assert src.next_batch(0.1) == []
    src.close()
    src.close()  # idempotent
    assert src._thread is not None and not src._thread.is_alive()


def test_linger_hands_out_what_came_meanwhile_as_one_batch(opened: list[StreamSource]) -> None:
    """A pipe written every few ms: one batch per ``linger``, and never a wait past max_wait
    (0 when a sub-window is due to close: what was read before it goes in at once)."""
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as rf, os.fdopen(w, "wb", buffering=0) as wf:
        src = _start(opened, _source("-", stream=rf, linger=0.3))
        wf.write(b"first\n")
        assert [b.lines for b in src.next_batch(5.0)] == [b"first\n"]  # no wait after quiet
        handed = time.monotonic()
        for i in range(5):
            wf.write(b"k%d\n" % i)
            time.sleep(0.005)
        got = src.next_batch(5.0)
        assert time.monotonic() - handed >= 0.29
        assert [b.lines for b in got] == [b"k0\nk1\nk2\nk3\nk4\n"]
        handed = time.monotonic()
        wf.write(b"due\n")
        deadline = time.monotonic() + 5.0
        while not (got := src.next_batch(0.0)) and time.monotonic() < deadline:
            time.sleep(0.001)  # the reader thread has not queued it yet
        assert [b.lines for b in got] == [b"due\n"]
        assert time.monotonic() - handed < 0.25  # within the linger: max_wait 0 won


def test_the_stdin_reader_sleeps_until_input_or_close() -> None:
    # The reader waits in select() on stdin and a wake-up pipe (it used to wake five
    # times a second to look at the stop flag): input is read at once, and close()
    # ends a wait at once, long before the 5 s safety timeout.
    from hotkeyd.sources.stream import _StdinReader

    r, w = os.pipe()
    stop = threading.Event()
    reader = _StdinReader(r, stop)
    got: list[bytes] = []

    def read_twice() -> None:
        for _ in range(2):
            got.append(reader.read1())

    t = threading.Thread(target=read_twice)
    try:
        t.start()
        os.write(w, b"k1\n")
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [b"k1\n"]
        time.sleep(0.2)  # the second read1() waits in select()
        t0 = time.monotonic()
        stop.set()
        reader.wake()
        t.join(4.0)
        assert not t.is_alive()
        assert time.monotonic() - t0 < 3.0
        assert got == [b"k1\n", b""]
    finally:
        stop.set()
        reader.wake()
        t.join(6.0)
        reader.close()
        reader.wake()  # after close: a no-op, never a write to a reused descriptor
        os.close(r)
        os.close(w)
