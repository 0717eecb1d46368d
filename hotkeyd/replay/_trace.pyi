# The C trace splitter (native/_tracemodule.c); the pure twin is _trace_py.
from typing import Any

def split_ticks(buf: Any, tick: float) -> tuple[list[tuple[int, bytes]], int, int]: ...
