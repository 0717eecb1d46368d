"""The embedded default publisher: one JSON line per message on a stream.

Without a Redis URL, ``cat keys.txt | hotkeyd run`` prints exactly the JSON that would
go on the channel, one message per line, so it can be piped to ``jq`` or another
program with nothing else installed.

Writes are synchronous: a local pipe is the whole transport, and a reader that stops
reading (``| head``) should apply back-pressure rather than have messages vanish. A
closed pipe or other write error is counted, logged at a limited rate, and never
raised into the detector loop.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any, cast

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.metrics import Metrics
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message
from hotkeyd.publish.base import DEFAULT_TOP_LIMIT, HotSetState
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["StdoutPublisher"]

logger = logging.getLogger(__name__)

_LABEL = "stdout"


class StdoutPublisher:
    """Writes each message as a JSON line to ``stream`` (text or binary).

    Args:
        stream: where to write, e.g. ``sys.stdout`` or an ``io.BytesIO`` in tests.
        instance: instance id stamped on messages.
        clock: stamps messages.
        metrics: counts notifications and failures (label ``publisher="stdout"``).
        full_on_start: write a ``full=true`` message from :meth:`start`.
    """

    def __init__(
        self,
        stream: IO[str] | IO[bytes],
        instance: str,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        *,
        full_on_start: bool = False,
        top_limit: int = DEFAULT_TOP_LIMIT,
        log_interval: float = 10.0,
    ) -> None:
        clock = clock or SystemClock()
        self._stream = stream
        self._text = isinstance(stream, io.TextIOBase)
        self._state = HotSetState(instance, clock, top_limit)
        self._metrics = metrics or Metrics()
        self._limiter = RateLimitedLog(logger, log_interval, clock.monotonic)
        self._write_lock = threading.Lock()
        self._full_on_start = full_on_start
        self._last_error: str | None = None
        self._closed = False
        self._unsent = 0

    @property
    def instance(self) -> str:
        return self._state.instance

    @property
    def healthy(self) -> bool:
        return self._last_error is None and not self._closed

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def unsent(self) -> int:
        """Messages whose write failed (a closed or broken output)."""
        return self._unsent

    def start(self) -> None:
        if self._full_on_start:
            self._write(self._state.full_message())

    def publish(
        self,
        hot: Sequence[HotEntry],
        still_hot: Sequence[HotEntry] = (),
        cool: Sequence[CoolEntry] = (),
        *,
        full: bool = False,
        final: bool = False,
    ) -> None:
        msg = self._state.record(hot, still_hot, cool, full=full, final=final)
        if msg is not None:
            self._write(msg)

    def update_state(
        self, hot_set: Sequence[HotEntry], top: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        self._state.replace(hot_set, top)

    def close(self, timeout: float = 5.0) -> None:
        """Flush the stream; the stream itself stays open (it is the caller's)."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def _write(self, msg: Message) -> None:
        data = msg.dumps() + b"\n"
        with self._write_lock:
            if self._closed:
                return
            try:
                if self._text:
                    text = cast(IO[str], self._stream)
                    try:
                        text.write(data.decode("utf-8"))
                    except UnicodeEncodeError:  # e.g. an ASCII-only terminal: same JSON, escaped
                        line = json.dumps(msg.to_json(), separators=(",", ":"), ensure_ascii=True)
                        text.write(line + "\n")
                else:
                    cast(IO[bytes], self._stream).write(data)
                self._stream.flush()
            except (OSError, ValueError) as exc:  # BrokenPipeError, closed file
                self._unsent += 1
                self._fail(exc)
                return
        self._last_error = None
        self._metrics.notifications.labels(_LABEL).inc()

    def _fail(self, exc: BaseException) -> None:
        self._last_error = f"writing to output failed: {type(exc).__name__}: {exc}"
        self._metrics.publish_failures.labels(_LABEL).inc()
        self._limiter.warning("write", "hotkeyd: %s", self._last_error)
