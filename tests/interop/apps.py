"""Read apps in every client language, speaking one line protocol, for end-to-end tests.

Each language ships a small app that reads one key through its ``HotCache`` at a steady
rate, exactly as a service would (Python: ``tests/interop/readapp.py``; Go:
``clients/go/examples/readapp``; Node: ``clients/node/examples/readapp.ts``; Java:
``io.hotkeyd.examples.ReadApp``). Arguments: ``--url redis://...`` or ``--cluster
host:port,...``, ``--key``, ``--rate`` (reads/s), ``--cold-keys N``, ``--namespace``,
``--seconds``. Protocol:

- stdout, one JSON object per line, each with ``t``, the unix time in ms when it happened
  (the apps share the host's clock): ``{"event":"ready"}`` once bootstrapped;
  ``{"event":"value","value":...,"prev_t":...}`` whenever the value it reads changes
  (``prev_t``: when the previous read, still the old value, returned);
  ``{"event":"stats","reads":N,"hot":bool,...}`` every second; ``{"event":"wrote"}``
  after a write; ``{"event":"done","reads":N,...}`` at the end.
- stdin: ``set <value>`` writes the key through the cache (SET + invalidation);
  ``stop`` ends the run.

Nothing here feeds the daemon: the apps only read and write through their SDK.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_CI = bool(os.environ.get("CI"))
LANGS = ("python", "go", "node", "java")


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if IN_CI:
            pytest.fail(f"{tool} is required in CI")
        pytest.skip(f"{tool} not installed")
    return path


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


_built: dict[str, list[str]] = {}


def command(lang: str, tmp: Path) -> list[str]:
    """The command that starts ``lang``'s read app (built once per session)."""
    if lang in _built:
        return _built[lang]
    if lang == "python":
        cmd = [sys.executable, str(ROOT / "tests" / "interop" / "readapp.py")]
    elif lang == "go":
        go = _need("go")
        exe = tmp / "readapp-go"
        _run([go, "build", "-o", str(exe), "./examples/readapp"], ROOT / "clients" / "go")
        cmd = [str(exe)]
    elif lang == "node":
        npm = _need("npm")
        node_dir = ROOT / "clients" / "node"
        if not (node_dir / "node_modules").is_dir():
            _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], node_dir)
        _run([npm, "run", "build", "--silent"], node_dir)
        cmd = [_need("node"), str(node_dir / "dist" / "examples" / "readapp.js")]
    elif lang == "java":
        mvn = _need("mvn")
        java_dir = ROOT / "clients" / "java"
        cp_file = tmp / "java-classpath.txt"
        _run([mvn, "-q", "-B", "-DskipTests", "package", "dependency:build-classpath",
              f"-Dmdep.outputFile={cp_file}"], java_dir)  # fmt: skip
        jars = sorted(
            str(p)
            for p in (java_dir / "target").glob("hotkeyd-*.jar")
            if not p.name.endswith(("-sources.jar", "-javadoc.jar"))
        )
        assert jars, "the Java client jar was not built"
        classpath = os.pathsep.join([jars[0], cp_file.read_text().strip()])
        cmd = [_need("java"), "-cp", classpath, "io.hotkeyd.examples.ReadApp"]
    else:
        raise ValueError(lang)
    _built[lang] = cmd
    return cmd


class ReadApp:
    """One read app process; its stdout lines are recorded with arrival times."""

    def __init__(self, lang: str, tmp: Path, *args: str) -> None:
        self.lang = lang
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.stderr_path = tmp / f"{lang}-{id(self)}.err"
        self._err = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            [*command(lang, tmp), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append((time.monotonic(), obj))
                self._cond.notify_all()

    def wait_event(self, pred: Any, timeout: float, what: str) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, e in self.events:
                    if pred(e):
                        return t, e
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    err = self.stderr_path.read_text()[-2000:]
                    raise AssertionError(
                        f"{self.lang} app: no {what} within {timeout} s: {self.events[-5:]}\n{err}"
                    )
                self._cond.wait(min(left, 0.2))

    def last(self, event: str) -> dict[str, Any] | None:
        with self._cond:
            for _, e in reversed(self.events):
                if e.get("event") == event:
                    return e
        return None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.send("stop")
        _, done = self.wait_event(lambda e: e.get("event") == "done", timeout, "done line")
        self.proc.wait(timeout)
        self._close()
        return done

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._close()

    def _close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                with contextlib.suppress(OSError):
                    f.close()
        self._reader.join(5)
        self._err.close()
