"""The pessimistic lock: ``SELECT ... FOR UPDATE``, as a context manager.

``locked_row`` opens a transaction, locks one row, hands it to the caller and commits when
the block ends (rolls back if it raises). A second caller locking the same row waits until
the first has committed, then reads what the first wrote: a retry of "pay" sees the order
PAID and does nothing. Where :func:`~hotkeyd.idempotency.schemes.transition` lets callers
race and tells the loser, this makes them queue (and a slow holder makes the others wait).

sqlite has no row locks. There ``BEGIN IMMEDIATE`` is the equivalent: it takes the
database's write lock at once, before the read, so a second locker waits (up to the
connection's ``timeout``) until the first commits, and then reads its writes. The same
serialization, for the whole database instead of one row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency import dbapi

__all__ = ["locked_row"]


@contextlib.contextmanager
def locked_row(
    conn: Any, table: str, id: Any, *, id_column: str = "id", nowait: bool = False
) -> Iterator[dict[str, Any] | None]:
    """Lock row ``id`` of ``table`` for one transaction and yield it (column -> value).

    Yields None when there is no such row (nothing is locked on PostgreSQL then; sqlite
    still holds its write lock, so an insert in the block is serialized too). The block's
    writes and the lock end together: committed when it ends, rolled back if it raises.

    Args:
        conn: a DB-API 2 connection (sqlite3, psycopg) with no transaction open: this
            helper owns the transaction (a caller's earlier writes would be committed
            with it, or its lock taken too late).
        nowait: PostgreSQL only: fail at once (``LockNotAvailable``) instead of waiting
            for the holder.

    Raises:
        ConfigError: a transaction is already open, a bad identifier, or ``nowait`` on
            sqlite.
    """
    t = dbapi.check_identifier(table)
    idc = dbapi.check_identifier(id_column, "id_column")
    postgres = dbapi.is_postgres(conn)
    if nowait and not postgres:
        raise ConfigError("nowait needs PostgreSQL (sqlite waits up to the connection's timeout)")
    if _in_transaction(conn):
        raise ConfigError("locked_row runs its own transaction: commit or roll back first")
    cur = conn.cursor()
    try:
        if postgres:
            lock = " FOR UPDATE NOWAIT" if nowait else " FOR UPDATE"
        else:
            cur.execute("BEGIN IMMEDIATE")  # the database's write lock, before the read
            lock = ""
        cur.execute(dbapi.sql(conn, f"SELECT * FROM {t} WHERE {idc} = ?{lock}"), (id,))
        found = cur.fetchone()
        names = [d[0] for d in cur.description or ()]
    except BaseException:
        cur.close()
        conn.rollback()
        raise
    cur.close()
    row = None if found is None else dict(zip(names, found, strict=True))
    try:
        yield row
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def _in_transaction(conn: Any) -> bool:
    flag = getattr(conn, "in_transaction", None)  # sqlite3
    if isinstance(flag, bool):
        return flag
    info = getattr(conn, "info", None)  # psycopg 3: IDLE is 0
    status = getattr(info, "transaction_status", None)
    return status is not None and int(status) != 0
