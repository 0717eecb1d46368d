"""Stdin and file sources: newline-separated keys, or ``key<TAB>count`` lines.

A reader thread reads large chunks and cuts them at the last newline, so every batch
holds whole lines and goes to the sketch's C fast path (``update_lines``) in one call.
The queue between reader and tick loop is bounded: a slow detector pushes back on the
reader (nothing is dropped), and ``next_batch`` never waits longer than asked.

A line longer than ``max_line`` bytes with no newline in sight is not buffered without
bound: its bytes are skipped up to the next newline and counted as ``oversized``.

``--follow`` tails a file like ``tail -F``: a path that does not exist yet is waited for,
more data is waited for at EOF, and the path is reopened when the file is rotated (new
inode; the old file is read to its end first, so no line is lost) or read again from 0
when it is truncated (copytruncate). Problems a restart cannot fix (the path is a
directory, or not readable) fail ``start()`` with one clear :class:`SourceError`, so a
supervisor sees a failed start instead of a daemon that exits 0 and stays dead.

A read error that ends the source early is kept in :attr:`StreamSource.error`: the
service turns it into a non-zero exit code, since a half-read file is not a success.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import queue
import select
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO, cast

from hotkeyd.batch import Batch
from hotkeyd.errors import SourceError
from hotkeyd.metrics import Metrics

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
        poll_interval: how often ``follow`` checks for new data, rotation, or the file
            appearing.
        queue_chunks: chunks buffered between reader and tick loop (memory bound:
            about ``queue_chunks`` MiB).
        linger: seconds between two batches handed out, at most (``next_batch`` never
            waits past its ``max_wait``): what the reader got meanwhile goes out as one
            batch. A live pipe written every few milliseconds then costs the loop one
            pass per ``linger`` instead of one per write; the daemon sets it to the
            detector's crossing-check interval, below which an earlier ingest finds no
            crossing sooner. 0: each chunk as soon as it is read.
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
        linger: float = 0.0,
    ) -> None:
        self.path = path
        self.name = "stdin" if path == "-" else "file"
        self.reports_idle = False
        self.counted = counted
        self.follow = follow and path != "-" and stream is None
        self.max_line = max_line
        self.poll_interval = poll_interval
        self.linger = linger
        self._handed = -math.inf  # time.monotonic() of the last batch handed out
        self._metrics = metrics
        self._stream = stream
        self._file: BinaryIO | None = None
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_chunks)
        self._stop = threading.Event()
        self._stdin: _StdinReader | None = None
        self._thread: threading.Thread | None = None
        self._exhausted = False
        self._error: SourceError | None = None
        self._inaccessible_logged = False  # follow mode: say once that the path is unusable

    # -- Source protocol -------------------------------------------------------------
    def start(self) -> None:
        """Check the path and start the reader thread.

        Raises:
            SourceError: the file is missing (without ``follow``), is a directory, or
                cannot be read.
        """
        if self._stream is None and self.path != "-":
            self._file = self._open_checked(self.path, missing_ok=self.follow)
        elif self._stream is None:
            _warn_if_stdin_is_not_data()
        self._thread = threading.Thread(target=self._run, name=f"hotkeyd-{self.name}", daemon=True)
        self._thread.start()

    def next_batch(self, max_wait: float) -> list[Batch]:
        """What the reader has queued (waits up to ``max_wait`` for it), small reads joined."""
        if self._exhausted:
            return []
        if self.linger > 0 and max_wait > 0:
            hold = min(max_wait, self._handed + self.linger - time.monotonic())
            if hold > 0:  # let the reader gather what comes within the linger
                self._stop.wait(hold)
                max_wait -= hold
        try:
            item = self._queue.get(timeout=max_wait) if max_wait > 0 else self._queue.get_nowait()
        except queue.Empty:
            return []
        chunks: list[bytes] = []
        while True:
            if item is _EOF:
                self._exhausted = True
                break
            assert isinstance(item, bytes)
            chunks.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        if not chunks:
            return []
        self._handed = time.monotonic()
        # Small reads (a pipe written often) join up to one read's size: fewer, larger
        # sketch calls, and no batch larger than a read would give.
        out: list[Batch] = []
        run: list[bytes] = []
        size = 0
        for chunk in chunks:
            if run and size + len(chunk) > _CHUNK:
                out.append(self._batch(run))
                run, size = [], 0
            run.append(chunk)
            size += len(chunk)
        out.append(self._batch(run))
        return out

    def _batch(self, chunks: list[bytes]) -> Batch:
        lines = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return Batch(lines=lines, counted=self.counted, source=self.name)

    def commit(self) -> None:
        """Nothing to acknowledge for streams."""

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    @property
    def error(self) -> SourceError | None:
        """Why reading stopped early, or None (clean EOF, still running, or closed).

        Set before the source reports itself exhausted, so a caller that sees
        ``exhausted`` can decide the exit code from it.
        """
        return self._error

    @property
    def connected(self) -> bool:
        """Always True: files and pipes have no server to lose."""
        return True

    @property
    def unhealthy(self) -> None:
        """Never stuck in a way a restart would fix."""
        return None

    def idle_watermark(self) -> None:
        """No event-time watermark: batches are stamped as they are read."""
        return None

    def close(self) -> None:
        self._stop.set()
        if self._stdin is not None:
            self._stdin.wake()
        # Unblock a reader waiting on a full queue.
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        if self._thread is None and self._file is not None:
            self._file.close()  # started never ran: do not leak the descriptor
            self._file = None

    # -- opening -----------------------------------------------------------------------
    @staticmethod
    def _open_checked(path: str, *, missing_ok: bool) -> BinaryIO | None:
        """Open ``path`` for reading, or None if it is missing and that is allowed.

        A FIFO is only checked here (opening it would block until a writer appears);
        the reader thread opens it.
        """
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise SourceError(f"input file not found: {path}") from None
        except OSError as exc:
            raise SourceError(f"cannot access input file {path}: {exc.strerror}") from exc
        if stat.S_ISDIR(st.st_mode):
            raise SourceError(f"input path is a directory, not a file: {path}")
        if stat.S_ISFIFO(st.st_mode):
            if not os.access(path, os.R_OK):
                raise SourceError(f"cannot read input file {path}: permission denied")
            return None
        try:
            return open(path, "rb")
        except FileNotFoundError:
            if missing_ok:  # removed between stat and open
                return None
            raise SourceError(f"input file not found: {path}") from None
        except PermissionError as exc:
            raise SourceError(f"cannot read input file {path}: permission denied") from exc
        except OSError as exc:
            raise SourceError(f"cannot open input file {path}: {exc.strerror}") from exc

    def _open_first(self) -> BinaryIO | None:
        """The stream to read first; in follow mode waits for the path to appear."""
        if self._stream is not None:
            return self._stream
        if self.path == "-":
            self._stdin = _StdinReader(sys.stdin.fileno(), self._stop)
            return cast(BinaryIO, self._stdin)
        if self._file is not None:
            opened, self._file = self._file, None
            return opened
        if not self.follow or _is_fifo(self.path):  # blocks until a writer opens it
            return open(self.path, "rb")
        logger.warning("waiting for %s to appear", self.path)
        while not self._stop.wait(self.poll_interval):
            f = self._reopen()
            if f is not None:
                logger.info("%s appeared; following it", self.path)
                return f
        return None

    def _reopen(self) -> BinaryIO | None:
        """Open the path again in follow mode; None while it is absent or unusable."""
        try:
            return self._open_checked(self.path, missing_ok=True)
        except SourceError as exc:
            if not self._inaccessible_logged:
                self._inaccessible_logged = True
                logger.warning("%s; still waiting for a readable file", exc)
            return None

    # -- reader thread ---------------------------------------------------------------
    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _oversized(self) -> None:
        self._metrics.malformed.labels(source=self.name, reason="oversized").inc()

    def _run(self) -> None:
        try:
            self._read_all()
        except Exception as exc:  # reported once, then the source ends
            self._error = SourceError(f"reading {self.path} failed: {exc}")
            self._error.__cause__ = exc
            self._metrics.source_errors.labels(source=self.name, kind="read").inc()
            logger.error("%s", self._error)
        finally:
            self._put(_EOF)

    def _read_all(self) -> None:
        f = self._open_first()
        if f is None:
            return  # stopped while waiting for the file
        cutter = _LineCutter(self.max_line, self._oversized)
        try:
            while not self._stop.is_set():
                chunk = _read(f)
                if chunk:
                    whole = cutter.feed(chunk)
                    if whole and not self._put(whole):
                        return
                    continue
                if not self.follow or self._stop.wait(self.poll_interval):
                    break
                f = self._after_eof(f, cutter)
            tail = cutter.flush()
            if tail and not self._stop.is_set():
                self._put(tail)  # a last line without a newline still counts
        finally:
            if f is not self._stream:
                f.close()

    def _after_eof(self, f: BinaryIO, cutter: _LineCutter) -> BinaryIO:
        """In follow mode at EOF: notice truncation and rotation, return what to read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return f  # moved away (or its directory is), nothing new yet: keep the old one
        cur = os.fstat(f.fileno())
        if (st.st_ino, st.st_dev) == (cur.st_ino, cur.st_dev):
            if stat.S_ISREG(cur.st_mode) and cur.st_size < f.tell():
                logger.info("%s was truncated; reading it again from the start", self.path)
                f.seek(0)
                cutter.reset()
            return f
        new = self._reopen()
        if new is None:
            return f
        # Rotated: what was written to the old file since the last read comes first.
        while chunk := _read(f):
            whole = cutter.feed(chunk)
            if whole and not self._put(whole):
                break
        tail = cutter.flush()
        if tail:
            self._put(tail)
        f.close()
        self._inaccessible_logged = False
        logger.info("%s was rotated; following the new file", self.path)
        return new


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _read(f: BinaryIO) -> bytes:
    return f.read1(_CHUNK) if hasattr(f, "read1") else f.read(_CHUNK)


class _LineCutter:
    """Cuts a byte stream into runs of whole lines, with a bounded carry-over.

    At most ``max_line`` bytes of an unfinished line are kept between chunks; a longer
    line is reported once through ``on_oversized`` and its bytes are dropped as they
    arrive, up to its newline.
    """

    __slots__ = ("max_line", "on_oversized", "rest", "skipping")

    def __init__(self, max_line: int, on_oversized: Callable[[], None]) -> None:
        self.max_line = max_line
        self.on_oversized = on_oversized
        self.rest = b""
        self.skipping = False

    def feed(self, chunk: bytes) -> bytes:
        """Add ``chunk``; return the whole lines now complete (maybe ``b""``)."""
        data = self.rest + chunk if self.rest else chunk
        self.rest = b""
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return b""
            data = data[nl + 1 :]
            self.skipping = False
        cut = data.rfind(b"\n")
        whole, rest = (b"", data) if cut < 0 else (data[: cut + 1], data[cut + 1 :])
        if len(rest) > self.max_line:
            self.on_oversized()
            rest, self.skipping = b"", True
        self.rest = rest
        return whole

    def flush(self) -> bytes:
        """The unfinished last line (the input ended), or ``b""``; then start afresh."""
        tail = b"" if self.skipping else self.rest
        self.reset()
        return tail

    def reset(self) -> None:
        """Forget the unfinished line (the file was truncated under it)."""
        self.rest = b""
        self.skipping = False


def _warn_if_stdin_is_not_data() -> None:
    """Say so when stdin is a terminal or /dev/null: usually a forgotten --source.

    ``docker run image`` without ``-i`` gives the daemon /dev/null, which would end
    the run at once without a word.
    """
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return
    if stat.S_ISCHR(mode):
        what = "a terminal" if sys.stdin.isatty() else "a character device (e.g. /dev/null)"
        logger.warning(
            "reading keys from stdin, which is %s; pass --source (or HOTKEYD_SOURCE) "
            "to read Kafka, MONITOR or a file",
            what,
        )


class _StdinReader(io.RawIOBase):
    """Reads stdin's file descriptor directly, waking up to notice a stop request.

    ``sys.stdin.buffer`` cannot be used from the reader thread: a thread blocked in
    its ``read`` holds the buffer's lock, and the interpreter aborts at exit when it
    cannot take that lock. ``select`` on stdin and a wake-up pipe lets the thread end
    cleanly: ``wake()`` (the source's ``close``) writes to the pipe. An idle daemon's
    reader then sleeps until input or the stop, not waking five times a second; the
    long timeout is only a safety net.
    """

    _SAFETY_WAKE = 5.0

    def __init__(self, fd: int, stop: threading.Event) -> None:
        super().__init__()
        self._fd = fd
        self._stop = stop
        self._wake_r, self._wake_w = os.pipe()
        self._wake_lock = threading.Lock()  # never a write to a closed (reused) fd

    def readable(self) -> bool:
        return True

    def wake(self) -> None:
        """Make a ``read1`` waiting in ``select`` return (called from another thread)."""
        with self._wake_lock, contextlib.suppress(OSError):
            if not self.closed:
                os.write(self._wake_w, b"x")

    def read1(self, size: int = _CHUNK) -> bytes:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], self._SAFETY_WAKE)
            if self._fd in ready:
                return os.read(self._fd, size)
            if ready:  # the wake-up pipe: empty it (the loop re-checks the stop)
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 64)
        return b""

    def close(self) -> None:
        """Leave the process's stdin open (the wake-up pipe is closed)."""
        with self._wake_lock:
            if not self.closed:
                for fd in (self._wake_r, self._wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
            super().close()
