"""Concurrent use from threads never crashes and keeps totals sane.

update_lines releases the GIL, so these tests would corrupt an unlocked sketch:
the per-object lock is what they exercise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .conftest import PURE


def _run(workers: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(len(workers))

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                start.wait()
                fn()
            except BaseException as exc:  # re-raised in the main thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(w)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
        assert not t.is_alive()
    if errors:
        raise errors[0]


def _scale(impl: Any) -> int:
    return 1 if impl.__name__.endswith("_sketch_py") or PURE else 10


def test_parallel_updates_keep_exact_totals(cls: Any, impl: Any) -> None:
    """Disjoint keys per thread, a sketch big enough to count them exactly."""
    sk = cls(k=64, memory=1 << 20, seed=3)
    rounds = 20 * _scale(impl)
    lines = b"".join(b"lines:%d\n" % (i % 10) for i in range(1000))  # 100 of each key
    counted = b"".join(b"counted:%d\t%d\n" % (i, i + 1) for i in range(10))
    many_keys = [b"many:%d" % (i % 10) for i in range(500)]  # 50 of each

    def w_lines() -> None:
        for _ in range(rounds):
            assert sk.update_lines(lines) == (1000, 0, 0)

    def w_counted() -> None:
        for _ in range(rounds):
            assert sk.update_lines(counted, counted=True) == (55, 0, 0)

    def w_update() -> None:
        for _ in range(rounds):
            for i in range(10):
                sk.update(b"single:%d" % i, 3)

    def w_many() -> None:
        for _ in range(rounds):
            sk.update_many(many_keys)

    def w_read() -> None:
        for _ in range(rounds * 5):
            top = sk.topk()
            assert len(top) <= 64
            assert top == sorted(top, key=lambda kv: (-kv[1], kv[0]))
            sk.estimate(b"lines:1")
            assert len(sk) <= 64
            sk.to_bytes()

    _run([w_lines, w_counted, w_update, w_many, w_read, w_lines])
    got = dict(sk.topk())
    for i in range(10):
        assert got[b"lines:%d" % i] == 2 * rounds * 100
        assert got[b"counted:%d" % i] == rounds * (i + 1)
        assert got[b"single:%d" % i] == rounds * 3
        assert got[b"many:%d" % i] == rounds * 50
    assert len(sk) == 40


def test_parallel_with_decay_clear_and_serialization(cls: Any, impl: Any) -> None:
    sk = cls(k=16, memory=8192, seed=5)
    rounds = 10 * _scale(impl)
    buf = b"".join(b"k%d\n" % (i * i % 97) for i in range(5000))

    def w_lines() -> None:
        for _ in range(rounds):
            sk.update_lines(buf)

    def w_update() -> None:
        for i in range(rounds * 100):
            sk.update(b"u%d" % (i % 13), i % 4)

    def w_decay() -> None:
        for i in range(rounds * 5):
            sk.decay(0.9)
            if i % 7 == 0:
                type(sk).from_bytes(sk.to_bytes())
            if i % 11 == 0:
                sk.clear()

    def w_read() -> None:
        for _ in range(rounds * 20):
            for key, count in sk.topk(8):
                assert count > 0
                assert isinstance(key, bytes)

    _run([w_lines, w_update, w_decay, w_read, w_lines])
    # clear() may have run last, so the heap can be empty; it must stay consistent.
    assert len(sk) <= 16
    assert all(c > 0 for _, c in sk.topk())
    sk.clear()
    sk.update_lines(b"after\nafter\n")
    assert sk.topk() == [(b"after", 2)]


def test_merge_both_directions_does_not_deadlock(impl: Any) -> None:
    a = impl.CountMinTopK(k=8, memory=8192, seed=1)
    b = impl.CountMinTopK(k=8, memory=8192, seed=1)
    a.update(b"x")
    b.update(b"y")
    n = 50 * _scale(impl)

    def ab() -> None:
        for _ in range(n):
            a.merge(b)

    def ba() -> None:
        for _ in range(n):
            b.merge(a)

    _run([ab, ba])
    assert {k for k, _ in a.topk()} == {b"x", b"y"}
