"""Stdin and file sources: newline-separated keys, or ``key<TAB>count`` lines.

A reader thread reads large chunks and cuts them at the last newline, so every batch
holds whole lines and goes to the sketch's C fast path (``update_lines``) in one call.
The queue between reader and tick loop is bounded: a slow detector pushes back on the
reader (nothing is dropped), and ``next_batch`` never waits longer than asked.

A line longer than ``max_line`` bytes with no newline in sight is not buffered without
bound: its bytes are skipped up to the next newline and counted as ``oversized``.

``--follow`` tails a growing file like ``tail -F``: it waits for more data, and reopens
the path when the file is rotated (new inode) or truncated.
"""

from __future__ import annotations

import io
import logging
import os
import queue
import select
import sys
import threading
import time
from typing import BinaryIO, cast

from hotkeyd.errors import SourceError
from hotkeyd.metrics import Metrics
from hotkeyd.sources.base import Batch

__all__ = ["StreamSource"]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20
_EOF = object()


class StreamSource:
    """Key lines from stdin (``path="-"``) or a file.

    Args:
        path: ``"-"`` for stdin, else a file path.
        metrics: where oversized lines and read errors are counted.
        counted: lines are ``key<TAB>count`` instead of bare keys.
        follow: keep reading as the file grows (tail -F); ignored for stdin.
        max_line: longest line accepted, in bytes; longer ones are skipped and counted.
        stream: an already-open binary stream to read instead of ``path`` (tests).
        poll_interval: how often ``follow`` checks for new data.
    """

    def __init__(
        self,
        path: str,
        *,
        metrics: Metrics,
        counted: bool = False,
        follow: bool = False,
        max_line: int = 1024 + 32,
        stream: BinaryIO | None = None,
        poll_interval: float = 0.05,
        queue_chunks: int = 32,
    ) -> None:
        self.path = path
        self.name = "stdin" if path == "-" else "file"
        self.counted = counted
        self.follow = follow and path != "-" and stream is None
        self.max_line = max_line
        self.poll_interval = poll_interval
        self._metrics = metrics
        self._stream = stream
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_chunks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exhausted = False
        self._error: BaseException | None = None

    # -- Source protocol -------------------------------------------------------------
    def start(self) -> None:
        if (
            self._stream is None
            and self.path != "-"
            and not os.path.exists(self.path)
            and not self.follow
        ):
            raise SourceError(f"input file not found: {self.path}")
        self._thread = threading.Thread(target=self._run, name=f"hotkeyd-{self.name}", daemon=True)
        self._thread.start()

    def next_batch(self, max_wait: float) -> list[Batch]:
        out: list[Batch] = []
        if self._exhausted:
            return out
        try:
            item = self._queue.get(timeout=max_wait) if max_wait > 0 else self._queue.get_nowait()
        except queue.Empty:
            return out
        while True:
            if item is _EOF:
                self._exhausted = True
                break
            assert isinstance(item, bytes)
            out.append(Batch(lines=item, counted=self.counted, source=self.name))
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        return out

    def commit(self) -> None:
        """Nothing to acknowledge for streams."""

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def close(self) -> None:
        self._stop.set()
        # Unblock a reader waiting on a full queue.
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    # -- reader thread ---------------------------------------------------------------
    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _open(self) -> BinaryIO:
        if self._stream is not None:
            return self._stream
        if self.path == "-":
            return cast(BinaryIO, _StdinReader(sys.stdin.fileno(), self._stop))
        return open(self.path, "rb")

    def _run(self) -> None:
        try:
            self._read_all()
        except Exception as exc:  # reported once, then the source ends
            self._error = exc
            self._metrics.source_errors.labels(source=self.name, kind="read").inc()
            logger.error("reading %s failed: %s", self.path, exc)
        finally:
            self._put(_EOF)

    def _read_all(self) -> None:
        f = self._open()
        rest = b""
        skipping = False  # inside an oversized line, dropping bytes up to the next newline
        try:
            while not self._stop.is_set():
                chunk = f.read1(_CHUNK) if hasattr(f, "read1") else f.read(_CHUNK)
                if not chunk:
                    if not self.follow:
                        break
                    f, rest, skipping = self._wait_for_more(f, rest, skipping)
                    continue
                data = rest + chunk if rest else chunk
                if skipping:
                    nl = data.find(b"\n")
                    if nl < 0:
                        rest = b""
                        continue
                    data = data[nl + 1 :]
                    skipping = False
                cut = data.rfind(b"\n")
                if cut < 0:
                    whole, rest = b"", data
                else:
                    whole, rest = data[: cut + 1], data[cut + 1 :]
                if len(rest) > self.max_line:
                    self._metrics.malformed.labels(source=self.name, reason="oversized").inc()
                    rest, skipping = b"", True
                if whole and not self._put(whole):
                    return
            if rest and not skipping and not self._stop.is_set():
                self._put(rest)  # a last line without a newline still counts
        finally:
            if f is not self._stream:
                f.close()

    def _wait_for_more(
        self, f: BinaryIO, rest: bytes, skipping: bool
    ) -> tuple[BinaryIO, bytes, bool]:
        """At EOF in follow mode: sleep, then reopen on rotation or truncation."""
        time.sleep(self.poll_interval)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return f, rest, skipping  # rotated away, new file not there yet
        try:
            cur = os.fstat(f.fileno())
            pos = f.tell()
        except (OSError, io.UnsupportedOperation):
            return f, rest, skipping
        if st.st_ino != cur.st_ino or st.st_size < pos:
            logger.info("%s was rotated or truncated; reopening", self.path)
            f.close()
            return open(self.path, "rb"), b"", False
        return f, rest, skipping


class _StdinReader(io.RawIOBase):
    """Reads stdin's file descriptor directly, waking up to notice a stop request.

    ``sys.stdin.buffer`` cannot be used from the reader thread: a thread blocked in
    its ``read`` holds the buffer's lock, and the interpreter aborts at exit when it
    cannot take that lock. ``select`` with a timeout lets the thread end cleanly.
    """

    def __init__(self, fd: int, stop: threading.Event) -> None:
        super().__init__()
        self._fd = fd
        self._stop = stop

    def readable(self) -> bool:
        return True

    def read1(self, size: int = _CHUNK) -> bytes:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if ready:
                return os.read(self._fd, size)
        return b""

    def close(self) -> None:
        """Leave the process's stdin open."""
        super().close()
