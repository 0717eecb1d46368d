"""The classic schemes over DB-API 2, on sqlite3 and a real PostgreSQL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotkeyd.errors import ConfigError
from hotkeyd.idempotency.schemes import (
    ConsumedMessages,
    Moved,
    insert_or_existing,
    locked_row,
    transition,
)
from hotkeyd.testing import PostgresServer

WORKER = str(Path(__file__).with_name("consumer_worker.py"))


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[tuple[str, str]]:
    """(kind, dsn) of a fresh database: a sqlite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "app.db")
        return
    import psycopg

    pg: PostgresServer = request.getfixturevalue("postgres")
    name = f"db_{unique}"
    with psycopg.connect(pg.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield "postgres", pg.dsn.replace("dbname=postgres", f"dbname={name}")


def connect(db: tuple[str, str]) -> Any:
    kind, dsn = db
    if kind == "sqlite":
        return sqlite3.connect(dsn, timeout=10)
    import psycopg

    return psycopg.connect(dsn)


def q(conn: Any, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    cur = conn.cursor()
    cur.execute(sql.replace("?", "%s") if not isinstance(conn, sqlite3.Connection) else sql, params)
    rows = cur.fetchall() if cur.description else []
    cur.close()
    return rows


# consumer de-duplication -------------------------------------------------------------


def _consumer_tables(db: tuple[str, str]) -> None:
    conn = connect(db)
    ConsumedMessages("consumed", consumer="billing").create_table(conn)
    q(conn, "CREATE TABLE effects (msg VARCHAR(64) NOT NULL)")
    conn.commit()
    conn.close()


def _effects(db: tuple[str, str]) -> dict[str, int]:
    conn = connect(db)
    rows = q(conn, "SELECT msg, COUNT(*) FROM effects GROUP BY msg")
    conn.close()
    return {m: int(n) for m, n in rows}


@pytest.mark.parametrize("crash", ["before-ack:2", "before-commit:2"])
def test_a_crashed_consumer_processes_each_message_once(
    db: tuple[str, str], tmp_path: Path, crash: str
) -> None:
    """The worker dies after its commit but before the ack (the redelivery is skipped), or
    before the commit (the redelivery runs it once); the restarted worker finishes."""
    _consumer_tables(db)
    offset = tmp_path / "offset"
    args = [sys.executable, WORKER, db[0], db[1], str(offset), "5"]
    died = subprocess.run([*args, crash], timeout=60)
    assert died.returncode == 3
    assert offset.read_text() == "2"  # m2 was not acknowledged: it is redelivered
    assert subprocess.run(args, timeout=60).returncode == 0
    assert _effects(db) == {f"m{i}": 1 for i in range(5)}


def test_first_time_is_in_the_callers_transaction(db: tuple[str, str]) -> None:
    _consumer_tables(db)
    consumed = ConsumedMessages("consumed", consumer="billing")
    conn = connect(db)
    assert consumed.first_time(conn, "m1")
    conn.rollback()  # the consumer's writes failed: the id goes with them
    assert consumed.first_time(conn, "m1")
    assert not consumed.first_time(conn, "m1")  # a duplicate does not abort the transaction
    q(conn, "INSERT INTO effects (msg) VALUES (?)", "m1")
    conn.commit()
    assert not consumed.first_time(conn, "m1")
    assert ConsumedMessages("consumed", consumer="audit").first_time(conn, "m1")
    conn.rollback()
    assert consumed.forget_before(conn, 4e9) == 1
    conn.close()


# state machine + CAS -------------------------------------------------------------------


@pytest.fixture
def orders(db: tuple[str, str]) -> Iterator[Any]:
    conn = connect(db)
    q(
        conn,
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, state VARCHAR(16) NOT NULL,"
        " version INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
    )
    q(conn, "INSERT INTO orders (id, state, version) VALUES (1, 'RESERVED', 3)")
    conn.commit()
    yield conn
    conn.close()


def test_transition_moved_already_conflict(orders: Any) -> None:
    t = transition(orders, "orders", 1, "RESERVED", "PAID", 3)
    assert (t.outcome, t.state, t.version, t.ok) == (Moved.MOVED, "PAID", 4, True)
    # a repeated "pay" (a retry, even with the old version) is a success with the order
    again = transition(orders, "orders", 1, "RESERVED", "PAID", 3)
    assert (again.outcome, again.state, again.version, again.ok) == (Moved.ALREADY, "PAID", 4, True)
    cancel = transition(orders, "orders", 1, "RESERVED", "CANCELLED", 3)
    assert (cancel.outcome, cancel.state, cancel.ok) == (Moved.CONFLICT, "PAID", False)
    missing = transition(orders, "orders", 99, "RESERVED", "PAID", 0)
    assert missing.outcome is Moved.CONFLICT and missing.state is None
    orders.commit()
    assert q(orders, "SELECT state, version FROM orders") == [("PAID", 4)]


def test_a_stale_version_is_a_conflict(orders: Any) -> None:
    t = transition(orders, "orders", 1, "RESERVED", "CANCELLED", 2)
    assert (t.outcome, t.state, t.version) == (Moved.CONFLICT, "RESERVED", 3)


def test_a_fenced_holder_is_refused_by_the_database(orders: Any) -> None:
    new = transition(orders, "orders", 1, "RESERVED", "RESERVED_AGAIN", 3, fence=200)
    assert new.outcome is Moved.MOVED
    old = transition(orders, "orders", 1, "RESERVED_AGAIN", "PAID", 4, fence=100)
    assert old.outcome is Moved.CONFLICT and old.fenced and old.state == "RESERVED_AGAIN"
    # even the state it wanted does not count as done for the fenced holder
    transition(orders, "orders", 1, "RESERVED_AGAIN", "PAID", 4, fence=200)
    late = transition(orders, "orders", 1, "RESERVED_AGAIN", "PAID", 5, fence=100)
    assert late.outcome is Moved.CONFLICT and late.fenced
    orders.commit()
    assert q(orders, "SELECT state, version, fence FROM orders") == [("PAID", 5, 200)]


# unique-index backstop -----------------------------------------------------------------


def test_a_duplicate_key_answers_the_existing_row(db: tuple[str, str]) -> None:
    conn = connect(db)
    q(
        conn,
        "CREATE TABLE payments (id INTEGER PRIMARY KEY, user_id VARCHAR(32) NOT NULL,"
        " idem_key VARCHAR(64) NOT NULL, amount INTEGER NOT NULL, UNIQUE (user_id, idem_key))",
    )
    conn.commit()
    row = {"id": 1, "user_id": "alice", "idem_key": "k", "amount": 100}
    assert insert_or_existing(conn, "payments", row, ["user_id", "idem_key"]) == (row, True)
    retry = {**row, "id": 2}
    got, created = insert_or_existing(conn, "payments", retry, ["user_id", "idem_key"])
    assert not created and got == row  # the first payment, not an error
    # the transaction is still usable (PostgreSQL would have aborted it without a savepoint)
    bob = {"id": 3, "user_id": "bob", "idem_key": "k", "amount": 7}
    assert insert_or_existing(conn, "payments", bob, ["user_id", "idem_key"])[1]
    conn.commit()
    with pytest.raises(Exception, match=r"(?i)null"):  # other integrity errors are raised
        insert_or_existing(
            conn, "payments", {**bob, "id": 4, "amount": None}, ["user_id", "idem_key"]
        )
    conn.rollback()
    assert q(conn, "SELECT COUNT(*) FROM payments") == [(2,)]
    conn.close()


# pessimistic lock ----------------------------------------------------------------------


def _pay(db: tuple[str, str], barrier: threading.Barrier, lock: bool) -> None:
    """One worker paying order 1: lock it (or only read it), check, pay if RESERVED."""
    conn = connect(db)
    try:
        barrier.wait(timeout=10)
        if lock:
            with locked_row(conn, "orders", 1) as order:
                assert order is not None
                if order["state"] == "RESERVED":
                    time.sleep(0.3)  # the other worker is waiting meanwhile
                    q(conn, "UPDATE orders SET state = 'PAID' WHERE id = 1")
                    q(conn, "INSERT INTO charges (order_id) VALUES (1)")
            return
        (state,) = q(conn, "SELECT state FROM orders WHERE id = 1")[0]
        if state == "RESERVED":  # the check-then-act race the lock exists for
            time.sleep(0.3)
            q(conn, "UPDATE orders SET state = 'PAID' WHERE id = 1")
            q(conn, "INSERT INTO charges (order_id) VALUES (1)")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("lock", [True, False], ids=["locked", "unlocked"])
def test_two_concurrent_workers_pay_once_under_the_lock(orders: Any, db: Any, lock: bool) -> None:
    """Two workers at once: under locked_row exactly one charge; with a plain read (the
    control, proving the race is real) both charge."""
    q(orders, "CREATE TABLE charges (order_id INTEGER NOT NULL)")
    orders.commit()
    barrier = threading.Barrier(2)
    workers = [threading.Thread(target=_pay, args=(db, barrier, lock)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert q(orders, "SELECT COUNT(*) FROM charges")[0][0] == (1 if lock else 2)
    orders.commit()


def test_locked_row_rolls_back_on_error_and_owns_its_transaction(orders: Any) -> None:
    with pytest.raises(RuntimeError, match="declined"), locked_row(orders, "orders", 1) as o:
        assert o is not None and o["state"] == "RESERVED" and o["version"] == 3
        q(orders, "UPDATE orders SET state = 'PAID' WHERE id = 1")
        raise RuntimeError("declined")
    assert q(orders, "SELECT state FROM orders")[0][0] == "RESERVED"  # rolled back
    orders.commit()
    with locked_row(orders, "orders", 99) as missing:
        assert missing is None
    q(orders, "UPDATE orders SET version = 4 WHERE id = 1")  # a transaction left open
    with pytest.raises(ConfigError, match="own transaction"), locked_row(orders, "orders", 1):
        pass
    orders.rollback()
