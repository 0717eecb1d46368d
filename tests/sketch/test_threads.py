"""Concurrent use from threads never crashes and keeps totals sane.

update_lines releases the GIL, so these tests would corrupt an unlocked sketch:
the per-object lock is what they exercise.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import PURE, load_native


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


_WAIT_PATH = """
import sys, threading, time
from hotkeyd.sketch import _sketch
sk = getattr(_sketch, sys.argv[1])(k=256, memory=1 << 22, max_key_len=64)
buf = b"".join(b"bg:%d\\n" % (i % 50) for i in range(400_000))
stop = threading.Event()
shared = {"keys": []}

def lines():  # keeps the sketch busy (GIL released) most of the time
    while not stop.is_set():
        sk.update_lines(buf)

def mutate():  # replaces the list's items (freeing the old keys) whenever it gets the GIL
    j = 0
    while not stop.is_set():
        shared["keys"][:] = [b"new:%07d:" % (j * 1000 + i) + b"n" * 20 for i in range(200)]
        j += 1
        time.sleep(0)

threads = [threading.Thread(target=lines), threading.Thread(target=mutate)]
for t in threads:
    t.start()
calls, t0 = 0, time.monotonic()
try:
    while time.monotonic() - t0 < 1.5:
        keys = [b"old:%07d:" % (calls * 1000 + i) + b"o" * 20 for i in range(200)]
        shared["keys"] = keys
        sk.update_many(keys, [calls + 1] * len(keys))  # later calls outrank earlier ones
        calls += 1
finally:
    stop.set()
    for t in threads:
        t.join()
bad = [(k, c) for k, c in sk.topk() if sk.estimate(k) < c]
type(sk).from_bytes(sk.to_bytes())
print(calls, len(bad), bad[:3])
"""


@pytest.mark.parametrize("name", ["HeavyKeeper", "CountMinTopK"])
def test_update_many_waiting_keeps_keys_alive_against_list_mutation(name: str) -> None:
    """update_many aggregates first, then, if update_lines holds the sketch, waits with the
    GIL released: another thread may then replace the caller's list items and free them.
    The keys must stay alive (hold), or their freed bytes, reused by the new keys, would be
    counted under the old keys' hashes: a tracked key whose estimate is below its count.
    (Run in a subprocess: a regression may also crash.)"""
    if PURE:
        pytest.skip("the C binding's wait path")
    load_native()
    proc = subprocess.run(
        [sys.executable, "-c", _WAIT_PATH, name], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    calls, bad, sample = proc.stdout.split(maxsplit=2)
    assert int(calls) > 100
    assert int(bad) == 0, sample


def test_space_evictions_is_read_between_batches(cls: Any, impl: Any) -> None:
    """space_evictions is sketch state: read while update_lines works on the sketch (the C
    path without the GIL), it must wait like every other method and show the count before
    or after the batch, never a value from the middle of it."""
    shape = {"k": 8, "width": 1 << 17, "depth": 4, "max_key_len": 64, "key_bytes": 64}
    sk = cls(**shape)
    # Keys of 64 bytes (one fits), each heavier than the last and mostly alone in its
    # buckets: every new key evicts the tracked one for space, all through the batch.
    n = 200_000 if impl.__name__.endswith("_sketch") else 6_000
    buf = b"".join(b"%064d\t%d\n" % (i, i + 1) for i in range(n))
    probe = cls(**shape)
    probe.update_lines(buf, counted=True)
    final = probe.space_evictions
    assert final > 1000
    seen: set[int] = set()
    done = threading.Event()

    def work() -> None:
        sk.update_lines(buf, counted=True)
        done.set()

    def poll() -> None:
        while not done.is_set():
            seen.add(sk.space_evictions)

    _run([work, poll])
    assert seen <= {0, final}, sorted(seen)[:5]
    assert sk.space_evictions == final
