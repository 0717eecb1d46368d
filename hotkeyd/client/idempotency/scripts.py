"""The guard's Lua scripts, one per transition, loaded once at import.

They live as ``.lua`` files beside this module so that other clients (Java, Go, Node)
can run the very same scripts and the Redis records stay compatible across languages.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["BEGIN", "COMPLETE", "EXTEND", "RELEASE"]


def _load(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


BEGIN = _load("begin.lua")  # NEW -> PROCESSING; expired PROCESSING -> PROCESSING (takeover)
COMPLETE = _load("complete.lua")  # PROCESSING -> DONE | FAILED (fenced)
EXTEND = _load("extend.lua")  # PROCESSING lease renewal (fenced)
RELEASE = _load("release.lua")  # PROCESSING -> NEW (fenced)
