"""Pathological rules files at start and on SIGHUP, and signals during start-up (issue 14).

At start a bad file is one line on stderr and exit 2, never a traceback; on SIGHUP the
running daemon keeps its old rules and counts the rejection; a SIGHUP in the first
fraction of a second after exec neither kills the daemon nor is lost.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hotkeyd.testing import run_daemon
from tests.client.helpers import wait_until
from tests.service.daemon import Daemon

pytestmark = pytest.mark.integration

GOOD = '[default]\nthreshold = 100\nttl = 2\n\n[[rule]]\nname = "carts"\nprefix = "cart:"\nthreshold = 50\n'
BAD = {
    "deep-array": "x = " + "[" * 5000 + "]" * 5000 + "\n",
    "deep-table": "x = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n",
    "400-digit-int": "[default]\nthreshold = " + "9" * 400 + "\n",
    "5000-digit-int": "[default]\nthreshold = " + "9" * 5000 + "\n",
    "not-utf8": "[default]\nthreshold = 1\n# \xff\n",
    "binary": "\x00\x01\x02",
}


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode("utf-8"))


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_rules_file_at_start_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    rules = tmp_path / "rules.toml"
    _write(rules, BAD[name])
    proc = run_daemon("--no-http", "--rules", str(rules), input=b"", timeout=30)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and str(rules) in err


def test_sighup_with_bad_files_keeps_old_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(GOOD)
    with Daemon("--rules", str(rules)) as d:
        assert d.metric("hotkeyd_rules_reloads_total", result="rejected") == 0
        for i, name in enumerate(sorted(BAD), start=1):
            _write(rules, BAD[name])
            d.signal(signal.SIGHUP)
            assert wait_until(
                lambda i=i: d.metric("hotkeyd_rules_reloads_total", result="rejected") == i,  # type: ignore[misc]
                timeout=10,
            ), (name, d.stderr)
            assert d.proc is not None and d.proc.poll() is None, name
        rules.write_text(GOOD.replace("threshold = 50", "threshold = 60"))
        d.signal(signal.SIGHUP)
        assert wait_until(lambda: d.metric("hotkeyd_rules_reloads_total", result="ok") == 1)
        # the old rules stayed in force the whole time: 'carts' still applies after reload
        d.feed_rate({b"cart:1": 400.0}, seconds=1.5)
        assert wait_until(lambda: any(h["key"] == "cart:1" for h in d.topk()["hot"]), timeout=10)
        assert "Traceback" not in d.stderr
        assert d.stop() == 0


@pytest.mark.parametrize("delay", [0.15, 0.3])
def test_sighup_right_after_start_neither_kills_nor_is_lost(tmp_path: Path, delay: float) -> None:
    """Handlers are installed ~0.07 s after exec (the interpreter's own start-up comes
    first; nothing in-process can be faster); before the fix the window was ~0.3 s."""
    rules = tmp_path / "rules.toml"
    rules.write_text(GOOD)
    d = Daemon("--rules", str(rules))
    d.proc = subprocess.Popen(
        d.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=d.env
    )
    try:
        time.sleep(delay)
        d.proc.send_signal(signal.SIGHUP)
        d._reader = threading.Thread(target=d._drain, daemon=True)
        d._reader.start()
        d.wait_healthy()
        assert d.proc.poll() is None
        # a SIGHUP that arrived before the service existed is applied once it does
        assert wait_until(
            lambda: d.metric("hotkeyd_rules_reloads_total", result="ok") == 1, timeout=10
        ), d.stderr
    finally:
        d.__exit__()
