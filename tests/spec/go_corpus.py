"""Builds the Go fuzz targets' seed corpus (clients/go/testdata/fuzz/<target>/) from
spec/vectors/hostile.json, so ``go test`` replays every hostile vector through each
target's invariants (and ``go test -fuzz`` starts from them).

The corpus is data built from the vectors, never edited by hand;
tests/spec/test_go_corpus.py rebuilds and compares. Run ``python tests/spec/go_corpus.py``
after changing hostile.json.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.spec.test_hostile_vectors import payload  # noqa: E402

CORPUS = ROOT / "clients" / "go" / "testdata" / "fuzz"
TARGETS = {  # hostile.json decoder -> the Go fuzz targets that read such documents
    "notification": ("FuzzDecodeMessage", "FuzzDecodeSnapshot"),
    "invalidation": ("FuzzDecodeInvalidation",),
}
MAX_SEED = 8192  # bytes: the 100,000-deep nestings stay in the vectors only


def go_bytes(data: bytes) -> str:
    """``data`` as a Go interpreted string literal (the corpus file format)."""
    out = []
    for b in data:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\x{b:02x}")
    return '"' + "".join(out) + '"'


def corpus() -> dict[str, str]:
    """relative path -> file text."""
    doc = json.loads((ROOT / "spec" / "vectors" / "hostile.json").read_text("utf-8"))
    out: dict[str, str] = {}
    for case in doc["cases"]:
        data = payload(case)
        if len(data) > MAX_SEED:
            continue
        name = "vector-" + hashlib.sha256(case["name"].encode()).hexdigest()[:16]
        for target in TARGETS.get(case["decoder"], ()):
            out[f"{target}/{name}"] = f"go test fuzz v1\n[]byte({go_bytes(data)})\n"
    return out


def main() -> None:
    for sub in CORPUS.glob("*/vector-*"):
        sub.unlink()
    for rel, text in corpus().items():
        path = CORPUS / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")


if __name__ == "__main__":
    main()
