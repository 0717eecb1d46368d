"""Python code run from inside update_many (``__index__``) cannot free what C reads.

Run in a subprocess: a regression would be a segfault, which must fail this test
rather than kill the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    from hotkeyd.sketch import {cls}
    keys = [(b"k%d" % i) * 40 for i in range(50_000)]
    counts = [1] * len(keys)

    class ShrinkKeys:
        def __index__(self):
            keys.clear()
            return 1

    class ShrinkCounts:
        def __index__(self):
            counts.clear()
            return 1

    sk = {cls}(k=10)
    outcomes = []
    for make in (lambda: [ShrinkKeys()] + counts[1:], lambda: [ShrinkCounts()] + counts[1:]):
        keys[:] = [(b"k%d" % i) * 40 for i in range(50_000)]
        counts[:] = [1] * len(keys)
        counts[:] = make()
        try:
            sk.update_many(keys, counts)
            outcomes.append("applied")
        except RuntimeError as exc:  # "... changed size during update_many", like dict iteration
            outcomes.append("refused")
    sk.update_many([b"after"] * 3)
    print(" ".join(outcomes), sk.estimate(b"after"))
    """
)


@pytest.mark.parametrize("cls", ["HeavyKeeper", "CountMinTopK"])
def test_mutating_the_lists_from_index_does_not_crash(cls: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(cls=cls)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr  # a crash is a negative return code
    *outcomes, after = proc.stdout.split()
    assert set(outcomes) <= {"applied", "refused"} and len(outcomes) == 2
    assert int(after) >= 3  # still counting afterwards (Count-Min may overestimate)
