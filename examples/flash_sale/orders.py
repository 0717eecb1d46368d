"""Layers 4 and 5 of the flash-sale template: an order state machine over SQL.

- Every state change is a compare-and-set (``UPDATE ... WHERE id = ? AND state = ?``):
  two workers that both think they own an order cannot both move it.
- ``idem_key`` is UNIQUE: even if a duplicate request got past the idempotency guard
  (Redis lost its record), the database refuses a second order for the same key.

::

    NEW --take stock--> RESERVED --pay--> PAID
     \\--no stock-----> SOLD_OUT     \\--> CANCELLED
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

TRANSITIONS = {"NEW": {"RESERVED", "SOLD_OUT"}, "RESERVED": {"PAID", "CANCELLED"}}

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idem_key TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL,
    product INTEGER NOT NULL,
    qty INTEGER NOT NULL,
    state TEXT NOT NULL,
    fence INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


class Orders:
    """Orders in one sqlite file (a connection per thread; WAL for concurrent readers)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        with self._conn() as c:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    def create(self, key: str, user: str, product: int, qty: int, fence: int) -> tuple[int, bool]:
        """Insert a NEW order; returns (id, True), or (existing id, False) for a known key."""
        c = self._conn()
        try:
            cur = c.execute(
                "INSERT INTO orders (idem_key, user_id, product, qty, state, fence, created)"
                " VALUES (?, ?, ?, ?, 'NEW', ?, ?)",
                (key, user, product, qty, fence, time.time()),
            )
            return int(cur.lastrowid or 0), True
        except sqlite3.IntegrityError:  # the unique key: this order exists already
            row = c.execute("SELECT id FROM orders WHERE idem_key = ?", (key,)).fetchone()
            return int(row[0]), False

    def move(self, order_id: int, frm: str, to: str) -> bool:
        """Compare-and-set the state; False if the order was not in ``frm`` any more."""
        if to not in TRANSITIONS.get(frm, ()):
            raise ValueError(f"no transition {frm} -> {to}")
        cur = self._conn().execute(
            "UPDATE orders SET state = ? WHERE id = ? AND state = ?", (to, order_id, frm)
        )
        return cur.rowcount == 1

    def get(self, order_id: int) -> dict[str, Any]:
        row = (
            self._conn()
            .execute(
                "SELECT id, idem_key, user_id, product, qty, state FROM orders WHERE id = ?",
                (order_id,),
            )
            .fetchone()
        )
        keys = ("id", "key", "user", "product", "qty", "state")
        return dict(zip(keys, row, strict=True))

    def summary(self) -> dict[str, Any]:
        """Orders and quantities per state, and how many keys have more than one order."""
        c = self._conn()
        by_state = {
            s: {"orders": n, "qty": q}
            for s, n, q in c.execute("SELECT state, COUNT(*), SUM(qty) FROM orders GROUP BY state")
        }
        dup = c.execute(
            "SELECT COUNT(*) FROM (SELECT idem_key FROM orders GROUP BY idem_key HAVING COUNT(*) > 1)"
        ).fetchone()[0]
        return {"by_state": by_state, "keys_with_several_orders": dup}
