"""State machine + compare-and-set on a version column, optionally fenced.

``transition`` is one ``UPDATE ... WHERE id = ? AND state = ? AND version = ?``. When it
changes no row, it never just says "failed": it reads the row and answers what it is, so
a repeated "pay" on an order that is already PAID answers success with the order
(:attr:`Moved.ALREADY`), and only a real conflict is one. With ``fence`` (a lease's
fencing token) the update also requires ``fence <= ?`` and stores the token: a holder
whose lease was taken over (a lower token) is refused by the database itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from hotkeyd.idempotency import dbapi

__all__ = ["Moved", "Transition", "transition"]


class Moved(enum.Enum):
    MOVED = "moved"  # this call moved the row
    ALREADY = "already"  # the row is in ``to_state`` already (a retry): success
    CONFLICT = "conflict"  # another state, version or a newer fence: not moved


@dataclass(frozen=True)
class Transition:
    """What ``transition`` did, and the row's state and version afterwards."""

    outcome: Moved
    state: str | None  # None: no such row
    version: int | None
    fenced: bool = False  # refused because a newer fencing token owns the row

    @property
    def ok(self) -> bool:
        """The row is in the wanted state (moved now or before): answer success."""
        return self.outcome is not Moved.CONFLICT


def transition(
    conn: Any,
    table: str,
    id: Any,
    from_state: str,
    to_state: str,
    expected_version: int,
    fence: int | None = None,
    *,
    id_column: str = "id",
) -> Transition:
    """Move row ``id`` of ``table`` from ``from_state`` to ``to_state`` if it is still at
    ``expected_version`` (columns ``state``, ``version`` and, with ``fence``, ``fence``).

    Runs in the caller's transaction (no commit). Raises ``LookupError``-free: a missing
    row is a CONFLICT with ``state`` None. ``RuntimeError`` if the driver cannot say how
    many rows changed (a silent 0 is the bug this function exists to prevent).
    """
    t = dbapi.check_identifier(table)
    idc = dbapi.check_identifier(id_column, "id_column")
    sets, where = "state = ?, version = version + 1", f"{idc} = ? AND state = ? AND version = ?"
    params: list[Any] = [to_state]
    if fence is not None:
        sets += ", fence = ?"
        params.append(fence)
        where += " AND fence <= ?"
    params += [id, from_state, expected_version]
    if fence is not None:
        params.append(fence)
    cur = conn.cursor()
    try:
        cur.execute(dbapi.sql(conn, f"UPDATE {t} SET {sets} WHERE {where}"), tuple(params))
        n = cur.rowcount
        if n == 1:
            return Transition(Moved.MOVED, to_state, expected_version + 1)
        if n != 0:
            raise RuntimeError(f"transition changed {n} rows of {t} (is {idc} unique?)")
        cols = "state, version" + (", fence" if fence is not None else "")
        cur.execute(dbapi.sql(conn, f"SELECT {cols} FROM {t} WHERE {idc} = ?"), (id,))
        row = cur.fetchone()
    finally:
        cur.close()
    if row is None:
        return Transition(Moved.CONFLICT, None, None)
    state, version = str(row[0]), int(row[1])
    fenced = fence is not None and row[2] is not None and int(row[2]) > fence
    if state == to_state and not fenced:
        return Transition(Moved.ALREADY, state, version)
    return Transition(Moved.CONFLICT, state, version, fenced=fenced)
