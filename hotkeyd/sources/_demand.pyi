"""Type stubs of the C demand report parser (native/_demandmodule.c)."""

from collections.abc import Sequence

Group = tuple[int, list[bytes], list[int]]
Report = tuple[str, int, float, int, int, list[Group], int]
Rejected = tuple[str, str]
Limits = tuple[int, int, int, int, int, int, int, int, float, float, float]

def parse(payloads: Sequence[bytes], limits: Limits) -> list[Report | Rejected]:
    """(app, seq, ts, interval_ms, total, groups, capped) or (reason, message) per
    payload; the GIL is released while parsing."""
