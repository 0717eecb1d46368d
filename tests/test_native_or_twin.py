"""One loader picks each C extension or its twin, and every user answers the same way."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from hotkeyd import native_or_twin

USERS = [
    "hotkeyd.sketch",
    "hotkeyd.sources.monitor.parser",
    "hotkeyd.replay.trace",
    "hotkeyd.detector.detector",
]
_PRINT = "import importlib; print(*(importlib.import_module(m).IMPLEMENTATION for m in %r))"


def _implementations(pure: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "HOTKEYD_PURE_PYTHON"}
    if pure is not None:
        env["HOTKEYD_PURE_PYTHON"] = pure
    out = subprocess.run(
        [sys.executable, "-c", _PRINT % USERS], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_every_extension_answers_native_when_built() -> None:
    got = _implementations(None)
    if got != ["native"] * len(USERS) and not os.environ.get("CI"):
        pytest.skip(f"not every C extension is built here: {got}")
    assert got == ["native"] * len(USERS)


@pytest.mark.parametrize("pure", ["1", "yes"])
def test_the_environment_forces_every_twin(pure: str) -> None:
    assert _implementations(pure) == ["python"] * len(USERS)


def test_zero_does_not_force_the_twin() -> None:
    assert _implementations("0") == _implementations(None)


def test_a_missing_build_falls_back_to_the_twin_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOTKEYD_PURE_PYTHON", raising=False)
    with caplog.at_level(logging.WARNING):
        mod, which = native_or_twin("hotkeyd.replay._no_such_build", "hotkeyd.replay._trace_py")
    assert which == "python" and mod.__name__ == "hotkeyd.replay._trace_py"
    assert "hotkeyd.replay._no_such_build" in caplog.text and "twin" in caplog.text
