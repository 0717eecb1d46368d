"""Fixtures of the idempotency tests: durable stores on sqlite3 and a real PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotkeyd.idempotency import DurableStore
from hotkeyd.testing import PostgresServer, postgres_bindir

IN_CI = bool(os.environ.get("CI"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the session (tables are unique per test)."""
    if postgres_bindir() is None:
        if IN_CI:
            pytest.fail("PostgreSQL is required in CI but is not installed")
        pytest.skip("PostgreSQL not installed")
    with PostgresServer() as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[DurableStore]:
    """A DurableStore with a fresh table, on sqlite3 or PostgreSQL (psycopg)."""
    if request.param == "sqlite":
        path = tmp_path / "idem.db"
        s = DurableStore(
            lambda: sqlite3.connect(path, timeout=10, check_same_thread=False),
            table=f"idem_{unique}",
        )
    else:
        import psycopg

        pg: PostgresServer = request.getfixturevalue("postgres")
        s = DurableStore(lambda: psycopg.connect(pg.dsn), table=f"idem_{unique}")
    s.create_table()
    yield s
    s.close()
