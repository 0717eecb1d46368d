"""The durable backstop: final results in a SQL table with a unique key (DB-API 2).

Redis replicates asynchronously, so a failover (or a restart without persistence) can
lose a fresh record and let a retry run the operation again. With a store, every final
result is also INSERTed into a table whose primary key is the record digest:

- ``begin`` that finds nothing in Redis looks in the store, so a result that Redis
  forgot is still replayed (and written back to Redis);
- a second completion of the same key fails on the unique key, so the duplicate is
  caught and reported (:class:`~hotkeyd.idempotency.errors.DuplicateCompletionError`) instead of
  silently replacing the first result.

Any DB-API 2 driver works; tested with ``sqlite3`` and ``psycopg`` (PostgreSQL)::

    store = DurableStore(lambda: sqlite3.connect("idem.db"))
    store.create_table()
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hotkeyd.errors import ConfigError

__all__ = ["DurableStore", "StoredFinal"]

_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{}"}


@dataclass(frozen=True)
class StoredFinal:
    """One final result as the store keeps it."""

    digest: str
    key: str
    fingerprint: str
    failed: bool
    token: int
    result: bytes


class DurableStore:
    """Final idempotency results in a SQL table (one connection per thread).

    Args:
        connect: returns a new DB-API 2 connection (called once per thread).
        table: table name (letters, digits, underscore).
        paramstyle: the driver's ``paramstyle``; read from the driver module if omitted.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        table: str = "hotkeyd_idempotency",
        paramstyle: str | None = None,
    ) -> None:
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise ConfigError(f"table must be letters, digits and '_', got {table!r}")
        self.connect = connect
        self.table = table
        self._paramstyle = paramstyle
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _module(self, conn: Any) -> Any:
        return sys.modules[type(conn).__module__.split(".")[0]]

    def _sql(self, conn: Any, sql: str) -> str:
        style = self._paramstyle or getattr(self._module(conn), "paramstyle", "qmark")
        if style not in _PLACEHOLDER:
            raise ConfigError(f"unsupported DB-API paramstyle {style!r}")
        mark = _PLACEHOLDER[style]
        parts = sql.split("?")
        out = parts[0]
        for i, part in enumerate(parts[1:], 1):
            out += mark.format(i) + part
        return out

    def _integrity_error(self, conn: Any) -> type[BaseException]:
        err = getattr(conn, "IntegrityError", None) or getattr(
            self._module(conn), "IntegrityError", None
        )
        if err is None:
            raise ConfigError("the DB-API driver has no IntegrityError")
        return err

    def create_table(self) -> None:
        """Create the table if it does not exist (BYTEA on PostgreSQL, BLOB elsewhere)."""
        conn = self._conn()
        blob = "BYTEA" if self._module(conn).__name__.startswith("psycopg") else "BLOB"
        self._run(
            conn,
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " digest VARCHAR(64) PRIMARY KEY,"
            " idem_key VARCHAR(1024) NOT NULL,"
            " fingerprint VARCHAR(64) NOT NULL,"
            " failed SMALLINT NOT NULL,"
            " token BIGINT NOT NULL,"
            f" result {blob} NOT NULL)",
            (),
        )

    def _run(self, conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """Execute one statement, commit, and return the first row (None for none)."""
        cur = conn.cursor()
        try:
            cur.execute(self._sql(conn, sql), params)
            row = cur.fetchone() if cur.description else None
            conn.commit()  # also ends a read transaction (PostgreSQL keeps one open)
            return row
        finally:
            cur.close()

    def get(self, digest: str) -> StoredFinal | None:
        """The final result stored for ``digest``, or None."""
        row = self._run(
            self._conn(),
            f"SELECT idem_key, fingerprint, failed, token, result FROM {self.table}"
            " WHERE digest = ?",
            (digest,),
        )
        if row is None:
            return None
        key, fp, failed, token, result = row
        return StoredFinal(digest, key, fp, bool(failed), int(token), bytes(result))

    def put(self, final: StoredFinal) -> StoredFinal:
        """Insert ``final``; returns what the table holds afterwards (ours or an earlier one)."""
        conn = self._conn()
        f = final
        try:
            self._run(
                conn,
                f"INSERT INTO {self.table} (digest, idem_key, fingerprint, failed, token, result)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (f.digest, f.key, f.fingerprint, int(f.failed), f.token, f.result),
            )
            return final
        except self._integrity_error(conn):
            conn.rollback()
        stored = self.get(final.digest)
        return stored if stored is not None else final

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
