"""The stub's types reach users: ``hotkeyd.sketch.HeavyKeeper`` is not ``Any``."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

SNIPPET = """
from typing_extensions import assert_type
from hotkeyd.sketch import CountMinTopK, HeavyKeeper, murmur3_32
sk = HeavyKeeper(k=10, memory=65536)
assert_type(sk, HeavyKeeper)
assert_type(sk.topk(), list[tuple[bytes, int]])
assert_type(sk.space_evictions, int)
assert_type(murmur3_32(b"a"), int)
CountMinTopK(k=10).merge(CountMinTopK(k=10))
HeavyKeeper(k="10")  # E: wrong type
"""


def test_stub_types_reach_users(tmp_path: Path) -> None:
    src = tmp_path / "use_sketch.py"
    src.write_text(SNIPPET)
    out, err, status = mypy_api.run(
        [str(src), "--cache-dir", str(tmp_path / "cache"), "--python-version", "3.11"]
    )
    # Exactly one error: the str passed as k. With HeavyKeeper as Any there would be none,
    # and assert_type would fail on the others.
    assert status == 1, out + err
    assert out.count("error:") == 1, out
    assert 'Argument "k" to "HeavyKeeper" has incompatible type "str"' in out, out
