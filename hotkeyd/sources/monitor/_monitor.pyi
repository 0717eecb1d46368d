"""Type stubs of the C MONITOR parser (native/_monitormodule.c)."""

from collections.abc import Iterable, Sequence

Spec = tuple[int, int, bytes | None, int, int, int, int, bool]
FeedResult = tuple[dict[int, list[bytes]], list[bytes], int, int, int, int, int, float, float]
ArgsLine = tuple[float, int, bytes, list[bytes]]

class Table:
    """Command table: name -> (special, key specs); see hotkeyd.sources.monitor.keyspec."""

    def __init__(self, entries: Iterable[tuple[bytes | str, int, Sequence[Spec]]]) -> None: ...
    def __len__(self) -> int: ...

class Parser:
    """Streaming MONITOR parser; feed() releases the GIL while parsing."""

    def __init__(
        self, table: Table | None = None, *, max_line: int = ..., skip_scripts: bool = True
    ) -> None: ...
    @property
    def pending(self) -> int: ...
    def feed(self, data: bytes | bytearray | memoryview) -> FeedResult:
        """(groups{db*2+write: keys}, replies, n_monitor, n_skipped, n_malformed,
        n_too_long, n_unknown, ts_first, ts_last)."""
    def feed_args(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[list[ArgsLine], list[bytes], int, int]: ...
    def set_skip(self, addrs: Sequence[bytes | str]) -> None: ...
    def set_table(self, table: Table | None) -> None: ...

def extract(table: Table, args: Sequence[bytes]) -> list[tuple[bytes, bool]]: ...
