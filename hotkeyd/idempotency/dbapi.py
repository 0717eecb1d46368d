"""What the guard's SQL helpers need from any DB-API 2 driver (sqlite3, psycopg, ...).

Statements are written with ``?`` and rewritten to the driver's ``paramstyle``; table and
column names are checked identifiers (they cannot be parameters); a unique-key violation
is told apart from other integrity errors (NOT NULL, CHECK), which are never swallowed.
"""

from __future__ import annotations

import sys
from typing import Any

from hotkeyd.errors import ConfigError

__all__ = ["check_identifier", "integrity_error", "is_postgres", "is_unique_violation", "sql"]

_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{}"}


def module_of(conn: Any) -> Any:
    """The driver module of a connection (``sqlite3``, ``psycopg``, ...)."""
    return sys.modules[type(conn).__module__.split(".")[0]]


def is_postgres(conn: Any) -> bool:
    return str(module_of(conn).__name__).startswith("psycopg")


def check_identifier(name: str, what: str = "table") -> str:
    """``name`` if it is letters, digits and '_' (starting with a letter), else ConfigError."""
    if not name or not name.replace("_", "").isalnum() or not name[0].isalpha():
        raise ConfigError(f"{what} must be letters, digits and '_', got {name!r}")
    return name


def sql(conn: Any, text: str, paramstyle: str | None = None) -> str:
    """``text`` with each ``?`` replaced by the driver's placeholder."""
    style = paramstyle or getattr(module_of(conn), "paramstyle", "qmark")
    if style not in _PLACEHOLDER:
        raise ConfigError(f"unsupported DB-API paramstyle {style!r}")
    mark = _PLACEHOLDER[style]
    parts = text.split("?")
    out = parts[0]
    for i, part in enumerate(parts[1:], 1):
        out += mark.format(i) + part
    return out


def integrity_error(conn: Any) -> type[BaseException]:
    err = getattr(conn, "IntegrityError", None) or getattr(module_of(conn), "IntegrityError", None)
    if err is None:
        raise ConfigError("the DB-API driver has no IntegrityError")
    return err


def is_unique_violation(exc: BaseException) -> bool:
    """A duplicate key (psycopg's UniqueViolation, SQLSTATE 23505; sqlite's UNIQUE/PRIMARY
    KEY constraint), as opposed to NOT NULL, CHECK or foreign-key failures."""
    if getattr(exc, "sqlstate", None) == "23505" or getattr(exc, "pgcode", None) == "23505":
        return True
    msg = str(exc)
    return msg.startswith("UNIQUE constraint failed") or "PRIMARY KEY must be unique" in msg
