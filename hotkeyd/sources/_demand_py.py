"""Pure-Python twin of the C demand report parser (``native/demand_parse.c``).

Same API and results as :mod:`hotkeyd.sources._demand`: :func:`parse` takes many raw
reports (MACs already checked) and returns, per report, either
``(app, seq, ts, interval_ms, total, groups, capped)`` or ``(reason, message)``. It is
:meth:`hotkeyd.protocol.demand.DemandReport.loads` plus the intake's step: a key listed
twice is one key whose counts add up before the cap, and the entries come back grouped
by db (dbs and keys in the order they first appear). The parity tests hold the two to
the same verdicts on the spec vectors and the fuzz corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

from hotkeyd.protocol.demand import DemandError, DemandReport

__all__ = ["Group", "Limits", "Rejected", "Report", "parse"]

Group = tuple[int, list[bytes], list[int]]
Report = tuple[str, int, float, int, int, list[Group], int]
Rejected = tuple[str, str]
Limits = tuple[int, int, int, int, int, int, int, int, float, float, float]
"""(max_bytes, entries_max, seq_max, name_max, interval_max, db_max, count_max,
max_depth, max_rate, interval_min_s, interval_max_s). The twin reads the structural
limits from the spec through ``DemandReport.loads``; the C core takes them here."""


def parse(payloads: Sequence[bytes], limits: Limits) -> list[Report | Rejected]:
    """One result per payload, in order (see the module docstring)."""
    max_bytes, max_rate, lo, hi = limits[0], limits[8], limits[9], limits[10]
    out: list[Report | Rejected] = []
    for i, data in enumerate(payloads):
        if type(data) is not bytes:
            raise TypeError(f"payload {i} must be bytes, not {type(data).__name__}")
        try:
            r = DemandReport.loads(data, max_bytes=max_bytes)
        except DemandError as exc:
            out.append((exc.reason, str(exc)))
            continue
        cap = max(1, int(max_rate * min(hi, max(lo, r.interval_ms / 1000.0))))
        per_key: dict[tuple[int, bytes], int] = {}
        for e in r.entries:
            per_key[e.db, e.key] = per_key.get((e.db, e.key), 0) + e.n
        by_db: dict[int, tuple[list[bytes], list[int]]] = {}
        capped = 0
        for (db, key), n in per_key.items():
            if n > cap:
                n, capped = cap, capped + 1
            keys, counts = by_db.setdefault(db, ([], []))
            keys.append(key)
            counts.append(n)
        groups = [(db, keys, counts) for db, (keys, counts) in by_db.items()]
        out.append((r.app, r.seq, r.ts, r.interval_ms, r.total, groups, capped))
    return out
