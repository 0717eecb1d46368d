"""One key, many callers at once: exactly one runs the operation, the rest see its result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer

from .worker import race

WORKER = str(Path(__file__).with_name("worker.py"))


def _check(results: list[dict[str, object]], expected: int) -> None:
    assert len(results) == expected
    firsts = [x["first"] for x in results]
    assert firsts.count("new") == 1, firsts
    assert set(firsts) <= {"new", "in_progress", "done"}
    finals = {(x["final"], x["result"]) for x in results}
    assert len(finals) == 1, finals  # everybody ends with the one stored result
    (final, result) = finals.pop()
    assert final == "done" and str(result).startswith("result of ")


def test_100_threads_one_key(  # type: ignore[no-untyped-def]
    redis_server: RedisServer, r: redis.Redis, ns: Namespace, capsys
) -> None:
    r.set(f"{ns.prefix}:go", 1)
    race(redis_server.url, ns.prefix, "flash-order", 100)
    results = json.loads(capsys.readouterr().out)
    _check(results, 100)
    assert int(r.get(f"{ns.prefix}:runs") or 0) == 1


def test_4_processes_one_key(redis_server: RedisServer, r: redis.Redis, ns: Namespace) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "race", redis_server.url, ns.prefix, "flash-order", "25"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    import time

    time.sleep(1.0)  # let every process start and reach the start line
    r.set(f"{ns.prefix}:go", 1)
    results: list[dict[str, object]] = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        results += json.loads(out)
    _check(results, 100)
    assert int(r.get(f"{ns.prefix}:runs") or 0) == 1
