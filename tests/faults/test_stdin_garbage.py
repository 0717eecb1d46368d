"""Garbage on stdin (issue 14, "what held up", kept as a test): random bytes, NUL,
invalid UTF-8 and a 50 MB line without a newline, in bounded memory, without a crash."""

from __future__ import annotations

import os
import random

import pytest

from tests.service.daemon import Daemon

from .conftest import seconds_until

pytestmark = pytest.mark.integration


def _rss(d: Daemon) -> int:
    assert d.proc is not None
    with open(f"/proc/{d.proc.pid}/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_stdin_garbage_is_counted_in_bounded_memory() -> None:
    rng = random.Random(14)
    with Daemon() as d:
        d.feed(b"warm\n" * 1000)
        seconds_until(lambda: d.metric("hotkeyd_source_events_total") >= 1000, 15)
        rss0 = _rss(d)
        d.feed(bytes(rng.getrandbits(8) for _ in range(1 << 20)))  # 1 MiB of random bytes
        d.feed(b"\x00" * 100_000 + b"\n" + b"\xff\xfe\xc3(\n" * 1000)
        chunk = os.urandom(1 << 20).replace(b"\n", b"x")
        for _ in range(50):  # a 50 MiB line, no newline until the end
            d.feed(chunk)
        d.feed(b"\nafter\n" * 500)
        seconds_until(lambda: d.metric("hotkeyd_source_malformed_total") >= 1, 30)
        seconds_until(lambda: any(t["key"] == "after" for t in d.topk()["top"]), 30)
        grown = _rss(d) - rss0
        oversized = d.metric("hotkeyd_source_malformed_total")
        print(
            f"\nstdin garbage: daemon up, {oversized:.0f} inputs counted malformed, "
            f"RSS +{grown / 2**20:.1f} MiB after a 50 MiB line"
        )
        assert grown < 40 << 20
        assert d.proc is not None and d.proc.poll() is None
        assert "Traceback" not in d.stderr
        assert d.stop() == 0
