"""Every Python block of docs/idempotency.md runs, in order, against a real redis-server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hotkeyd.testing import RedisServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "idempotency.md"


def test_doc_code_blocks_run(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    namespace: dict[str, object] = {"__name__": "docs_idempotency"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"block {i + 1} of {DOC.name} failed: {exc!r}\n{block}") from exc
