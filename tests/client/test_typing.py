"""HotCache's reads are typed: bytes by default, str with decode_responses=True (mypy)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

SAMPLE = """
import redis
from hotkeyd.client import HotCache

plain = HotCache(redis.Redis())
reveal_type(plain.get("k"))
reveal_type(plain.hgetall("h"))
text = HotCache.from_url("redis://h/0", decode_responses=True)
reveal_type(text.get("k"))
reveal_type(text.mget(["a", "b"]))
raw = HotCache.from_url("redis://h/0")
reveal_type(raw.hget("h", "f"))
with HotCache.from_url("redis://h/0", decode_responses=True) as c:
    reveal_type(c.get("k"))
"""


def test_reads_are_typed_by_decode_responses(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    out, err, _ = api.run(
        [
            str(sample),
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / ".mypy"),
            "--no-error-summary",
        ]
    )
    revealed = [
        line.split("Revealed type is ", 1)[1].strip('"').replace("builtins.", "")
        for line in out.splitlines()
        if "Revealed type" in line
    ]
    assert "error:" not in out, out
    assert revealed == [
        "bytes | None",
        "dict[bytes, bytes]",
        "str | None",
        "list[str | None]",
        "bytes | None",
        "str | None",
    ], out + err
