"""Replay the kept fuzz corpus (tests/fuzz/corpus/<target>/) through the differential
checks: every input the fuzzer found interesting stays a regression test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.checks import CHECKS

CORPUS = Path(__file__).parent / "corpus"
CASES = sorted((t, p) for t in CHECKS for p in (CORPUS / t).glob("*") if p.is_file())


def test_corpus_is_not_empty() -> None:
    for target in CHECKS:
        assert any((CORPUS / target).iterdir()), target


@pytest.mark.parametrize("target,path", CASES, ids=[f"{t}/{p.name[:12]}" for t, p in CASES])
def test_corpus_input(target: str, path: Path) -> None:
    CHECKS[target](path.read_bytes())
