"""Every code block in README.md and docs/*.md runs as shown, or says why it cannot.

How a block is treated, by its fence language:

- ``python``: the blocks of one file run in order in one interpreter (later blocks use
  names earlier ones defined, as a reader would), against a real redis-server started
  for the test: ``127.0.0.1:6379`` / ``localhost:6379`` in the text are pointed at it.
- ``json``: must parse; ``toml``: must parse.
- anything else (``sh``, ``text``, other languages, output, diagrams) must be marked.

To mark a block that cannot run here, put this line right above its fence::

    <!-- snippet: skip: <reason> -->

The reason is required; the test counts the skipped blocks and prints them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

from hotkeyd.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)[^\n]*$")
_MARK = re.compile(r"<!--\s*snippet:\s*skip:\s*(\S.*?)\s*-->")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, with the skip mark of the line above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        above = lines[i - 1] if i else ""
        mark = _MARK.search(above)
        out.append(
            Block(path, i + 1, lang, "\n".join(body) + "\n", mark.group(1) if mark else None)
        )
        i = j + 1
    return out


ALL = [b for p in DOCS for b in blocks(p)]


def test_every_block_runs_or_says_why_not() -> None:
    unmarked = [
        b.where + f" ({b.lang or 'no language'})"
        for b in ALL
        if b.skip is None and b.lang not in ("python", "py", "json", "toml")
    ]
    assert not unmarked, (
        "blocks that neither run nor carry '<!-- snippet: skip: <reason> -->': "
        + ", ".join(unmarked)
    )
    skipped = [b for b in ALL if b.skip is not None]
    print(f"\n{len(ALL)} blocks: {len(ALL) - len(skipped)} run, {len(skipped)} marked skip")
    for b in skipped:
        print(f"  skip {b.where}: {b.skip}")


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in ("json", "toml") and not b.skip],
                         ids=lambda b: b.where)  # fmt: skip
def test_data_blocks_parse(block: Block) -> None:
    if block.lang == "json":
        json.loads(block.code)
    else:
        tomllib.loads(block.code)


_RUNNER = """
import sys, traceback
ns = {"__name__": "__main__"}
for i, (where, code) in enumerate(BLOCKS):
    try:
        exec(compile(code, where, "exec"), ns)
    except SystemExit:
        pass
    except BaseException:
        traceback.print_exc()
        print(f"SNIPPET FAILED: {where}", file=sys.stderr)
        sys.exit(1)
print("ALL OK")
"""


@pytest.mark.integration
@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path: Path, redis_server: RedisServer, tmp_path: Path) -> None:
    todo = [b for b in blocks(path) if b.lang in ("python", "py") and not b.skip]
    if not todo:
        return
    port = str(redis_server.port)
    payload = []
    for b in todo:
        code = re.sub(r"(127\.0\.0\.1|localhost):6379", f"127.0.0.1:{port}", b.code)
        payload.append((b.where, textwrap.dedent(code)))
    script = f"BLOCKS = {payload!r}\n{_RUNNER}"
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "ALL OK" in run.stdout, run.stderr[-4000:]
