"""Fixtures for the sketch tests: run each test against the C core and the twin.

Like markupsafe's conftest, ``impl`` is parametrized over both implementations.
With ``HOTKEYD_PURE_PYTHON=1`` only the twin is used (that CI run checks the
fallback path). The native side is skipped only outside CI when the extension is
missing; in CI a missing extension fails.
"""

from __future__ import annotations

import importlib.util
import os
import types
from pathlib import Path
from typing import Any

import pytest

IN_CI = bool(os.environ.get("CI"))
PURE = os.environ.get("HOTKEYD_PURE_PYTHON", "") not in ("", "0")


def load_native() -> types.ModuleType:
    """The C extension, or skip (fail in CI) when it was not built."""
    try:
        from hotkeyd.sketch import _sketch
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"hotkeyd.sketch._sketch is required in CI but cannot be imported: {exc}")
        pytest.skip(f"hotkeyd.sketch._sketch not built ({exc})")
    return _sketch


def load_python() -> types.ModuleType:
    from hotkeyd.sketch import _sketch_py

    return _sketch_py


IMPLS = ["python"] if PURE else ["native", "python"]


@pytest.fixture(scope="session", params=IMPLS)
def impl(request: pytest.FixtureRequest) -> Any:
    """A module-like object with HeavyKeeper, CountMinTopK and murmur3_32."""
    return load_native() if request.param == "native" else load_python()


@pytest.fixture(scope="session", params=["HeavyKeeper", "CountMinTopK"])
def cls(impl: Any, request: pytest.FixtureRequest) -> Any:
    """Each sketch class of each implementation."""
    return getattr(impl, request.param)


@pytest.fixture(scope="session")
def native_mod() -> types.ModuleType:
    """The C extension (parity tests compare it with the twin directly)."""
    return load_native()


@pytest.fixture(scope="session")
def python_mod() -> types.ModuleType:
    """The pure-Python twin."""
    return load_python()


@pytest.fixture(scope="session")
def zipf() -> types.ModuleType:
    """benchmarks/zipf.py, loaded by path (benchmarks/ is not a package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "zipf.py"
    spec = importlib.util.spec_from_file_location("hotkeyd_bench_zipf", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
