"""benchmarks/ab_sketch.py builds two variants of the C core into one process and
compares them (a smoke test on a tiny stream: the script must keep working)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import PURE

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ab_sketch.py"

pytestmark = pytest.mark.skipif(
    PURE or (shutil.which("cc") is None and shutil.which("gcc") is None),
    reason="needs a C compiler and the native build",
)


def _run(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_speed_and_precision_of_two_builds() -> None:
    variants = ["--variant", "tree", "--variant", "tree:SK_DIRECT_NUM=100000"]
    out = _run(
        *variants, "--cells", "0.8:12:lines,1.0:34:many", "--events", "30000", "--repeats", "1"
    )
    lines = [ln for ln in out.splitlines() if ln.startswith("alpha=")]
    assert len(lines) == 2
    for ln in lines:
        rates = [float(x) for x in re.findall(r"v\d ([0-9.]+) M/s", ln)]
        assert len(rates) == 2 and all(r > 0 for r in rates)
        assert "(1.000)" in ln.split("v1")[0]  # ratios are against the first variant
    out = _run(*variants, "--precision", "--streams", "1", "--seeds", "1", "--events", "30000")
    got = [float(x) for x in re.findall(r"v\d ([0-9.]+) \(min", out)]
    assert len(got) == 2 and all(0.0 <= p <= 1.0 for p in got)


def test_bad_variant_is_refused() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--variant", "tree", "--variant", "branch:x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "variant must be" in out.stderr
