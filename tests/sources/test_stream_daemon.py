"""The file source through the real daemon: ``hotkeyd run -s PATH [--follow]`` as a subprocess."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from service.daemon import Daemon, Listener

from hotkeyd.testing import RedisServer, run_daemon

RULES = """
[default]
threshold = 300
ttl = 2.0
cooldown = 0.5
"""


def _append_rate(path: Path, rates: dict[bytes, float], seconds: float, step: float = 0.05) -> None:
    """Append each key at its rate (per second) for ``seconds``, like a live access log."""
    carry = dict.fromkeys(rates, 0.0)
    end = time.monotonic() + seconds
    with path.open("ab") as f:
        while time.monotonic() < end:
            t0 = time.monotonic()
            for key, rate in rates.items():
                carry[key] += rate * step
                n = int(carry[key])
                carry[key] -= n
                f.write((key + b"\n") * n)
            f.flush()
            time.sleep(max(0.0, step - (time.monotonic() - t0)))


@pytest.mark.integration
def test_follow_waits_for_the_file_and_survives_rotation(
    redis_server: RedisServer, unique: str, tmp_path: Path
) -> None:
    """The log does not exist when the daemon starts; it appears, is rotated, and the hot
    key written only to the new file is published on the channel."""
    channel = f"hk:{unique}"
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    log = tmp_path / "access.log"
    background = {b"bg:%d" % i: 5.0 for i in range(40)}
    listener = Listener(redis_server.url, channel)
    try:
        with Daemon(
            "-s", str(log), "--follow", "--redis-url", redis_server.url,
            "--channel", channel, "--rules", str(rules),
        ) as d:  # fmt: skip
            # Healthy and still running although the file is missing: tail -F waits.
            assert listener.wait_for(lambda: "waiting for" in d.stderr, 5), d.stderr
            time.sleep(0.3)
            assert d.proc is not None and d.proc.poll() is None
            _append_rate(log, background, 1.0)
            log.rename(tmp_path / "access.log.1")
            deadline = time.monotonic() + 15
            while b"item:hot" not in listener.hot_keys() and time.monotonic() < deadline:
                _append_rate(log, {**background, b"item:hot": 2000.0}, 0.5)
            assert listener.wait_for(lambda: b"item:hot" in listener.hot_keys(), 3), d.stderr
            assert d.metric("hotkeyd_source_events_total", source="file") > 1000
            assert d.stop() == 0
    finally:
        listener.close()
    assert set(listener.hot_keys()) == {b"item:hot"}
    assert listener.messages[-1][1].final


@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_directory_source_exits_non_zero_with_one_line(tmp_path: Path, follow: list[str]) -> None:
    proc = run_daemon(
        "-s", str(tmp_path), *follow, "--no-http", "--log-level", "WARNING", timeout=30
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "directory" in err and str(tmp_path) in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line.lower()]) == 1


def test_missing_file_without_follow_exits_non_zero(tmp_path: Path) -> None:
    missing = tmp_path / "missing.log"
    proc = run_daemon("-s", str(missing), "--no-http", timeout=30)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "not found" in err and "Traceback" not in err
