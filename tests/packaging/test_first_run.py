"""README's first commands on a stock Debian/Ubuntu Python, in a clean clone.

Debian 12 and Ubuntu 24.04 mark their system Python externally managed (PEP 668):
``pip install`` into it fails. ``make`` therefore keeps a project venv (``.venv``) and
installs there; this test proves it with the system interpreter, as a newcomer would
run it: ``git clone`` then ``make install`` / ``make run`` with ``PYTHON=/usr/bin/python3``.

Cost: about a minute (venv, pip from its cache, the C build; ``make run`` until the
demo prints its first status line).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
IN_CI = bool(os.environ.get("CI"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _env() -> dict[str, str]:
    """The caller's environment without the test run's own venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    own_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != own_bin)
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not os.path.exists(SYSTEM_PYTHON):
        if IN_CI:
            pytest.fail(f"{SYSTEM_PYTHON} is required in CI (the stock-Debian first run)")
        pytest.skip(f"no {SYSTEM_PYTHON}")
    where = tmp_path_factory.mktemp("first-run") / "hotkeyd"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True, timeout=120)
    return where


def test_make_install_with_the_system_python(clone: Path) -> None:
    proc = subprocess.run(
        ["make", "install", f"PYTHON={SYSTEM_PYTHON}"],
        cwd=clone,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert ".venv/bin/hotkeyd" in proc.stdout  # says where the command is
    version = subprocess.run(
        [str(clone / ".venv/bin/hotkeyd"), "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and "hotkeyd, version" in version.stdout
    native = subprocess.run(
        [
            str(clone / ".venv/bin/python"),
            "-c",
            "import hotkeyd.sketch as s, hotkeyd.sources.monitor.parser as p; "
            "print(s.IMPLEMENTATION, p.IMPLEMENTATION)",
        ],
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert native.stdout.split() == ["native", "native"], native.stderr  # both C cores built
    # the system interpreter itself was left alone (PEP 668)
    system = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", "import hotkeyd"], cwd="/", capture_output=True
    )
    assert system.returncode != 0


def test_make_run_reaches_the_demo(clone: Path) -> None:
    proc = subprocess.Popen(
        ["make", "run", f"PYTHON={SYSTEM_PYTHON}"],
        cwd=clone,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 300
    try:
        for line in proc.stdout:
            seen.append(line)
            if "events=" in line:  # the demo's first status line
                break
            assert time.monotonic() < deadline, "".join(seen[-30:])
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        proc.stdout.close()
    assert any("events=" in line for line in seen), "".join(seen[-30:])
    # A quiet first run: no packaging warnings before the demo (setuptools' license
    # deprecation once printed ~45 lines here).
    noisy = [ln for ln in seen if "eprecat" in ln or "Warning" in ln]
    assert not noisy, "".join(noisy[:10])
