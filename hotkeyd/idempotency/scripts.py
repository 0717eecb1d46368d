"""The guard's Lua scripts, one per transition, loaded once at import.

They live in ``spec/lua/idempotency_*.lua`` (read through :mod:`hotkeyd.protocol.contract`), the
one source other clients (Java, Go, Node) load too, so the Redis records stay compatible
across languages.
"""

from __future__ import annotations

from hotkeyd.protocol.contract import lua

__all__ = ["BEGIN", "COMPLETE", "EXTEND", "RELEASE"]


def _load(name: str) -> str:
    return lua(f"idempotency_{name}")


BEGIN = _load("begin.lua")  # NEW -> PROCESSING; expired PROCESSING -> PROCESSING (takeover)
COMPLETE = _load("complete.lua")  # PROCESSING -> DONE | FAILED (fenced)
EXTEND = _load("extend.lua")  # PROCESSING lease renewal (fenced)
RELEASE = _load("release.lua")  # PROCESSING -> NEW (fenced)
