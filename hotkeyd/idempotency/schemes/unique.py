"""The unique-index backstop: a duplicate insert answers with the row already there.

Catching the duplicate-key error and returning a failure is the classic pitfall: the
client sees an error for an operation that succeeded, and keeps retrying. Here the
insert runs under a SAVEPOINT, so a duplicate rolls back only itself (PostgreSQL would
otherwise abort the caller's whole transaction), and the existing row is returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hotkeyd.idempotency import dbapi

__all__ = ["insert_or_existing"]


def insert_or_existing(
    conn: Any,
    table: str,
    row: Mapping[str, Any],
    key: Sequence[str],
    *,
    returning: Sequence[str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Insert ``row``; on a unique violation of ``key`` return the existing row instead.

    Args:
        conn: a DB-API 2 connection; runs in its current transaction (no commit).
        table: the table; ``row`` maps its columns to values.
        key: the columns of the unique index (their values are taken from ``row``).
        returning: columns of the row returned (default: the columns of ``row``).

    Returns:
        ``(row, True)`` when inserted (the values given), ``(existing row, False)`` on a
        duplicate key. Other integrity errors (NOT NULL, CHECK) are raised as they are.
    """
    t = dbapi.check_identifier(table)
    cols = [dbapi.check_identifier(c, "column") for c in row]
    keys = [dbapi.check_identifier(c, "column") for c in key]
    out = [dbapi.check_identifier(c, "column") for c in (returning or cols)]
    marks = ", ".join("?" for _ in cols)
    created = True
    cur = conn.cursor()
    try:
        cur.execute("SAVEPOINT hotkeyd_unique")
        try:
            cur.execute(
                dbapi.sql(conn, f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({marks})"),
                tuple(row[c] for c in cols),
            )
        except dbapi.integrity_error(conn) as exc:
            cur.execute("ROLLBACK TO SAVEPOINT hotkeyd_unique")
            cur.execute("RELEASE SAVEPOINT hotkeyd_unique")
            if not dbapi.is_unique_violation(exc):
                raise
            created = False
        else:
            cur.execute("RELEASE SAVEPOINT hotkeyd_unique")
            if returning is None:
                return dict(row), True
        match = " AND ".join(f"{c} = ?" for c in keys)
        cur.execute(
            dbapi.sql(conn, f"SELECT {', '.join(out)} FROM {t} WHERE {match}"),
            tuple(row[c] for c in keys),
        )
        found = cur.fetchone()
    finally:
        cur.close()
    if found is None:  # the violated index was another one, or the row is gone
        raise LookupError(f"duplicate key in {t}, but no row matches {list(keys)}")
    return dict(zip(out, found, strict=True)), created
