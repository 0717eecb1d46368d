"""The CLI through click's runner: options, precedence and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hotkeyd import __version__
from hotkeyd.cli import cli
from hotkeyd.testing import run_daemon


def _run(
    *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args), env=env, input=input)
    return res.exit_code, res.stdout, res.stderr


def test_version() -> None:
    code, out, _ = _run("--version")
    assert code == 0 and __version__ in out


def test_run_help_names_every_env_var() -> None:
    code, out, _ = _run("run", "--help")
    assert code == 0
    for env in (
        "HOTKEYD_SOURCE",
        "HOTKEYD_REDIS_URL",
        "HOTKEYD_RULES",
        "HOTKEYD_WINDOW",
        "HOTKEYD_HTTP_HOST",
    ):
        assert env in out
    assert "127.0.0.1" in out  # the safe default bind is visible


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    conf = tmp_path / "hotkeyd.toml"
    conf.write_text("max_hot = 11\nwindow = 3.0\ntick = 0.25\nnamespace = 'fromfile'\n")
    code, out, err = _run(
        "run",
        "--config",
        str(conf),
        "--max-hot",
        "33",
        "--print-config",
        env={"HOTKEYD_MAX_HOT": "22", "HOTKEYD_WINDOW": "2.0"},
    )
    assert code == 0, err
    cfg = json.loads(out)
    assert cfg["max_hot"] == 33  # flag beats env and file
    assert cfg["window"] == 2.0  # env beats file
    assert cfg["tick"] == 0.25  # file beats default
    assert cfg["namespace"] == "fromfile"
    assert cfg["hysteresis"] == 0.8  # default


def test_config_file_errors_are_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text("max_hot = [\n")
    code, _, err = _run("run", "--config", str(conf), "--print-config")
    assert code == 2 and "bad.toml" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--redis-url", "http://nope"], "invalid Redis URL"),
        (["--window", "0"], "window"),
        (["--tick", "5", "--window", "1"], "tick"),
        (["--source", "gopher://x"], "unsupported source"),
        (["--source", "kafka://"], "kafka"),
        (["--hysteresis", "1.5"], "hysteresis"),
    ],
)
def test_bad_settings_exit_2_with_one_line(args: list[str], needle: str) -> None:
    code, out, err = _run("run", "--no-http", *args, input="")
    assert code == 2, (out, err)
    assert needle.lower() in err.lower()
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_rules_file_names_line_and_field(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rule]]\nname = "a"\nprefix = "a:"\n\n[[rule]]\nname = "b"\nprefix = "b:"\nthreshold = -1\n'
    )
    code, _, err = _run("run", "--no-http", "--rules", str(rules), input="")
    assert code == 2
    assert "line 8" in err and "threshold" in err and "'b'" in err


def test_stdout_mode_as_a_real_subprocess() -> None:
    """`cat keys.txt | hotkeyd run` works with nothing else installed."""
    keys = b"hot\n" * 5000 + b"".join(b"cold:%d\n" % i for i in range(500))
    proc = run_daemon("--no-http", "--log-level", "WARNING", input=keys, timeout=30)
    assert proc.returncode == 0, proc.stderr
    msgs = [json.loads(line) for line in proc.stdout.splitlines()]
    hot = {h["key"] for m in msgs for h in m["hot"]}
    assert hot == {"hot"}
    assert msgs[-1]["final"] is True


def test_unreachable_redis_for_top_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "top", "--redis-url", "redis://127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("hotkeyd: error:") and "Traceback" not in proc.stderr


def test_check_fails_cleanly_without_daemon() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "check", "--http", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1 and "cannot reach" in proc.stderr


def test_source_path_with_spaces_is_one_source(tmp_path: Path) -> None:
    keys = tmp_path / "my keys.txt"
    keys.write_bytes(b"a\n" * 10)
    code, out, err = _run("run", "-s", str(keys), "--print-config")
    assert code == 0, err
    assert json.loads(out)["sources"] == [str(keys)]


def test_config_file_typos_and_bad_types_are_errors_naming_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "hk.toml"
    conf.write_text("max_hott = 3\n")
    code, _, err = _run("run", "--config", str(conf), "--print-config")
    assert code == 2 and "hk.toml" in err and "max_hott" in err
    conf.write_text("max_hot = 'many'\n")
    code, _, err = _run("run", "--config", str(conf), "--print-config")
    assert code == 2 and "hk.toml" in err and "max_hot" in err


def test_print_config_masks_passwords() -> None:
    code, out, err = _run(
        "run",
        "--redis-url",
        "redis://u:S3CRET@127.0.0.1:6379/0",
        "-s",
        "kafka://k:K4FKA@127.0.0.1:9092/t",
        "--print-config",
    )
    assert code == 0, err
    assert "S3CRET" not in out and "K4FKA" not in out and "***" in out


def test_check_rejects_a_non_http_url_in_one_line() -> None:
    code, _, err = _run("check", "--http", "notaurl")
    assert code == 2 and "http://" in err and "Traceback" not in err


def test_check_with_unreachable_redis_is_one_line_without_password() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hotkeyd", "check", "--redis-url", "redis://u:S3CRET@127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "S3CRET" not in proc.stderr and proc.stderr.startswith("hotkeyd: error:")


def test_a_source_read_error_makes_run_exit_1() -> None:
    """/proc/self/mem opens fine and fails on read: input was lost, so not exit 0."""
    proc = run_daemon("--no-http", "-s", "/proc/self/mem", text=True, timeout=30)
    assert proc.returncode == 1
    assert "reading /proc/self/mem failed" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("level", "kafka_debug"), [("debug", True), ("INFO", False)])
def test_kafka_logs_show_with_log_level_debug(level: str, kafka_debug: bool) -> None:
    """kafka-python's logger used to be pinned at max(CRITICAL, root): never shown."""
    code = (
        "import logging\n"
        "from hotkeyd.daemon.logs import configure_logging\n"
        f"configure_logging({level!r})\n"
        "print(logging.getLogger('kafka.conn').isEnabledFor(logging.DEBUG),"
        " logging.getLogger('kafka.conn').isEnabledFor(logging.ERROR))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert out == [str(kafka_debug), str(kafka_debug)]  # quiet (reconnect noise) unless debug
