"""Consumer de-duplication: process each message of an at-least-once queue once.

Kafka redelivers what was not acknowledged (committed offsets) when a consumer crashes.
The message id is inserted into a consumption table **in the same transaction as the
consumer's own writes** (on the caller's connection), and the queue is acknowledged only
after that transaction committed::

    with conn:                                   # one database transaction
        if consumed.first_time(conn, msg_id):    # False: a redelivery, already applied
            apply(conn, msg)                     # the consumer's own writes
    consumer.commit()                            # ack after the database commit

- crash before the commit: both the writes and the id roll back; the redelivery runs once;
- crash after the commit, before the ack: the redelivery finds the id and is skipped.

A separate store committing on its own connection cannot give this: between its commit
and the consumer's there is always a crash that loses one of the two.
"""

from __future__ import annotations

import time
from typing import Any

from hotkeyd.idempotency import dbapi

__all__ = ["ConsumedMessages"]


class ConsumedMessages:
    """The consumption table: ``(consumer, message_id)`` is its primary key.

    Args:
        table: table name (letters, digits, underscore).
        consumer: which consumer (group) this is; two consumers of one message each
            process it once.
    """

    def __init__(self, table: str = "hotkeyd_consumed", consumer: str = "") -> None:
        self.table = dbapi.check_identifier(table)
        self.consumer = consumer

    def create_table(self, conn: Any) -> None:
        """Create the table if it is missing (commits, like any DDL here)."""
        cur = conn.cursor()
        try:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} ("
                " consumer VARCHAR(255) NOT NULL,"
                " message_id VARCHAR(1024) NOT NULL,"
                " consumed_at DOUBLE PRECISION NOT NULL,"
                " PRIMARY KEY (consumer, message_id))"
            )
        finally:
            cur.close()
        conn.commit()

    def first_time(self, conn: Any, message_id: str) -> bool:
        """Record ``message_id`` in the caller's open transaction; False if it was there.

        Does not commit: the caller commits it together with its own writes.
        ``ON CONFLICT DO NOTHING`` (sqlite >= 3.24, PostgreSQL) keeps a duplicate from
        aborting the caller's transaction (PostgreSQL aborts it on any error).
        """
        cur = conn.cursor()
        try:
            cur.execute(
                dbapi.sql(
                    conn,
                    f"INSERT INTO {self.table} (consumer, message_id, consumed_at)"
                    " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                ),
                (self.consumer, str(message_id), time.time()),
            )
            n = cur.rowcount
        finally:
            cur.close()
        if n not in (0, 1):
            raise RuntimeError(f"the driver reported {n} rows for one INSERT")
        return n == 1

    def forget_before(self, conn: Any, when: float) -> int:
        """Delete ids consumed before ``when`` (UNIX time): once the queue's retention
        has passed, nothing can be redelivered. Returns how many; the caller commits."""
        cur = conn.cursor()
        try:
            cur.execute(
                dbapi.sql(conn, f"DELETE FROM {self.table} WHERE consumer = ? AND consumed_at < ?"),
                (self.consumer, when),
            )
            return int(cur.rowcount)
        finally:
            cur.close()
