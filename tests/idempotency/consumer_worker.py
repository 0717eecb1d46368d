"""A consumer of an at-least-once queue that can crash on purpose (for test_schemes.py).

    python consumer_worker.py KIND DSN OFFSET_FILE COUNT [CRASH]

KIND is sqlite or postgres. The "queue" is messages m0..m<COUNT-1>; the acknowledged
offset lives in OFFSET_FILE (what Kafka's committed offset is). Each message adds one row
to ``effects`` (no unique key: a second processing would show) in the same transaction as
its id in the consumption table. CRASH is ``before-commit:N`` or ``before-ack:N``: the
process dies (``os._exit``) at that point of message N, as a SIGKILL would.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from hotkeyd.idempotency.schemes import ConsumedMessages


def connect(kind: str, dsn: str) -> Any:
    if kind == "sqlite":
        return sqlite3.connect(dsn, timeout=10)
    import psycopg

    return psycopg.connect(dsn)


def main() -> None:
    kind, dsn, offset_file, count = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    crash = sys.argv[5] if len(sys.argv) > 5 else ""
    conn = connect(kind, dsn)
    consumed = ConsumedMessages("consumed", consumer="billing")
    offset = int(offset_file.read_text()) if offset_file.exists() else 0
    for i in range(offset, count):
        msg = f"m{i}"
        cur = conn.cursor()
        if consumed.first_time(conn, msg):
            cur.execute(
                "INSERT INTO effects (msg) VALUES (" + ("?" if kind == "sqlite" else "%s") + ")",
                (msg,),
            )
        cur.close()
        if crash == f"before-commit:{i}":
            os._exit(3)
        conn.commit()
        if crash == f"before-ack:{i}":
            os._exit(3)
        offset_file.write_text(str(i + 1))  # the ack
    conn.close()


if __name__ == "__main__":
    main()
