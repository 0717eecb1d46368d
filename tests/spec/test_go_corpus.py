"""The Go fuzz targets' seed corpus is the hostile vectors (tests/spec/go_corpus.py)."""

from __future__ import annotations

from tests.spec import go_corpus


def test_the_go_corpus_is_built_from_the_vectors() -> None:
    """Stale or hand-edited seeds fail here: rerun ``python tests/spec/go_corpus.py``."""
    want = go_corpus.corpus()
    have = {
        str(p.relative_to(go_corpus.CORPUS)): p.read_text("utf-8")
        for p in go_corpus.CORPUS.glob("*/vector-*")
    }
    assert have == want
    assert len(want) >= 20
