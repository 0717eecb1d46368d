"""One release number: VERSION, and every artifact's build says the same.

setuptools reads VERSION itself (pyproject: dynamic); package.json and pom.xml carry it
literally (their tools need it there), so this test and ``make check-versions`` (which
``make dist`` runs first) keep them equal; ``make set-version V=x.y.z`` rewrites all three.
The Go module's version is its tag, ``clients/go/v<VERSION>`` (ops/release/goproxy.py).
"""

from __future__ import annotations

import json
import re
import subprocess

import hotkeyd

from .fresh import ROOT, VERSION


def test_every_artifact_carries_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert hotkeyd.__version__ == VERSION
    node = json.loads((ROOT / "clients" / "node" / "package.json").read_text())
    assert node["version"] == VERSION
    pom = (ROOT / "clients" / "java" / "pom.xml").read_text()
    m = re.search(r"<artifactId>hotkeyd-client</artifactId>\s*<version>([^<]+)</version>", pom)
    assert m and m.group(1) == VERSION, m
    assert f"<version>{VERSION}</version>" in (ROOT / "clients/java/README.md").read_text()
    assert f"## [{VERSION}]" in (ROOT / "CHANGELOG.md").read_text(), "no CHANGELOG entry"


def test_make_check_versions_catches_a_mismatch(tmp_path: object) -> None:
    ok = subprocess.run(["make", "-s", "check-versions"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        ["make", "-s", "check-versions", "VERSION=9.9.9"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode != 0 and "9.9.9" in bad.stdout, bad.stdout
