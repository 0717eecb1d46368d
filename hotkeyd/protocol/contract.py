"""The language-neutral contract: JSON Schemas and Lua scripts, read from one place.

The repository keeps them in ``spec/`` (``spec/schema/*.json``, ``spec/lua/*.lua``),
the single source every client (Python, Java, ...) reads. A built wheel carries a copy
at ``hotkeyd/spec/`` (``setup.py`` copies it in ``build_py``); an editable install or a
source checkout reads ``spec/`` beside the package. The conformance vectors
(``spec/vectors/``) are test data and are not shipped.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from hotkeyd.errors import HotkeydError

__all__ = ["ContractError", "lua", "schema", "spec_dir"]

_PACKAGE = Path(__file__).resolve().parent.parent  # hotkeyd/


class ContractError(HotkeydError, FileNotFoundError):
    """A schema or script of the contract is missing from this installation."""


@cache
def spec_dir() -> Path:
    """Where ``schema/``, ``lua/`` and ``limits.json`` are: the shipped copy, else the checkout's."""
    for candidate in (_PACKAGE / "spec", _PACKAGE.parent / "spec"):
        parts = (candidate / "schema").is_dir(), (candidate / "lua").is_dir()
        if all(parts) and (candidate / "limits.json").is_file():
            return candidate
    raise ContractError(
        f"hotkeyd's contract files are missing: neither {_PACKAGE / 'spec'} nor "
        f"{_PACKAGE.parent / 'spec'} exists (a broken installation?)"
    )


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema ``name`` (e.g. ``"notification-v1.json"``) as a dict."""
    obj: dict[str, Any] = json.loads(_read("schema", name))
    return obj


def lua(name: str) -> str:
    """The source of the Lua script ``name`` (e.g. ``"sharded_take_all.lua"``)."""
    return _read("lua", name)


@cache
def _read(kind: str, name: str) -> str:
    path = spec_dir() / kind / name
    if path.name != name or not path.is_file():
        raise ContractError(f"no {kind} file {name!r} in {spec_dir() / kind}")
    return path.read_text(encoding="utf-8")
