"""Layers 4 and 5 of the flash-sale template: an order state machine over SQL.

- Every state change is a compare-and-set (``UPDATE ... WHERE id = ? AND state = ?``):
  two workers that both think they own an order cannot both move it.
- ``(user_id, idem_key)`` is UNIQUE: even if a duplicate request got past the idempotency
  guard (Redis lost its record), the database refuses a second order for the same key of
  the same user (another user's key is another order).
- ``fence`` is the lease's fencing token: a holder that takes an order over (the first
  attempt stalled past its lease) raises it with ``claim``, and every ``move`` requires
  it, so the stale holder's updates are refused by the database.

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
    idem_key TEXT NOT NULL,
    user_id TEXT NOT NULL,
    product INTEGER NOT NULL,
    qty INTEGER NOT NULL,
    state TEXT NOT NULL,
    fence INTEGER NOT NULL,
    created REAL NOT NULL,
    UNIQUE (user_id, idem_key)
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
            row = c.execute(
                "SELECT id FROM orders WHERE user_id = ? AND idem_key = ?", (user, key)
            ).fetchone()
            return int(row[0]), False

    def claim(self, order_id: int, fence: int) -> bool:
        """Take the order over with a newer fencing token; False: a newer holder owns it."""
        cur = self._conn().execute(
            "UPDATE orders SET fence = ? WHERE id = ? AND fence <= ?", (fence, order_id, fence)
        )
        return cur.rowcount == 1

    def move(self, order_id: int, frm: str, to: str, fence: int) -> bool:
        """Compare-and-set the state, fenced; False if the order was not in ``frm`` any
        more or another holder (a newer fencing token) owns it now."""
        if to not in TRANSITIONS.get(frm, ()):
            raise ValueError(f"no transition {frm} -> {to}")
        cur = self._conn().execute(
            "UPDATE orders SET state = ? WHERE id = ? AND state = ? AND fence = ?",
            (to, order_id, frm, fence),
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

    def state_of(self, user: str, key: str) -> str | None:
        row = (
            self._conn()
            .execute("SELECT state FROM orders WHERE user_id = ? AND idem_key = ?", (user, key))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def summary(self) -> dict[str, Any]:
        """Orders and quantities per state, and how many keys have more than one order."""
        c = self._conn()
        by_state = {
            s: {"orders": n, "qty": q}
            for s, n, q in c.execute("SELECT state, COUNT(*), SUM(qty) FROM orders GROUP BY state")
        }
        dup = c.execute(
            "SELECT COUNT(*) FROM (SELECT 1 FROM orders GROUP BY user_id, idem_key"
            " HAVING COUNT(*) > 1)"
        ).fetchone()[0]
        return {"by_state": by_state, "keys_with_several_orders": dup}
