"""TOML helpers for the rules loader: parsing, source line lookup, pattern decoding.

``tomllib`` reports line numbers only for syntax errors; a value that parses but is
invalid (``threshold = "abc"``) comes back without position. :func:`locate_fields`
therefore scans the source text itself and records the line of every ``[[rule]]``
header, the ``[default]`` header and each ``field =`` inside them, so that
validation errors can say ``rules.toml line 12: rule 'carts': threshold ...``.
The scan is line-based and best-effort: it understands headers, comments, quoted
and dotted keys and multi-line strings, which covers files written by hand; for
exotic layouts (rules given as inline tables) the message falls back to the nearest
known line or to the file name alone.
"""

from __future__ import annotations

import base64
import re
import sys
from typing import Any

from hotkeyd.errors import RulesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["decode_pattern", "locate_fields", "parse_toml"]

_ARRAY_HEADER = re.compile(r"^\[\[\s*([^\]]+?)\s*\]\]")
_TABLE_HEADER = re.compile(r"^\[\s*([^\]]+?)\s*\]")
_KEY = re.compile(r"""^("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*[.=]""")
_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse TOML, turning syntax errors into :class:`RulesError` naming the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_POS.search(msg)
        if m:
            msg = msg[: m.start()]
            raise RulesError(f"{source} line {m.group(1)}: TOML syntax error: {msg}") from exc
        raise RulesError(f"{source}: TOML syntax error: {msg}") from exc
    except RecursionError:
        raise RulesError(f"{source}: TOML nested too deeply") from None
    except Exception as exc:  # e.g. an integer of more than 4,300 digits (ValueError)
        raise RulesError(f"{source}: cannot parse: {str(exc)[:120]}") from None


def _unquote(key: str) -> str:
    if key[:1] in ("'", '"'):
        return key[1:-1]
    return key


def locate_fields(text: str) -> dict[tuple[Any, ...], int]:
    """Map table and field positions to 1-based line numbers.

    Keys of the result: ``("default",)``, ``("default", field)``, ``("rule", i)``,
    ``("rule", i, field)`` (``i`` counts ``[[rule]]`` headers from 0) and
    ``(field,)`` for top-level keys. The first occurrence wins.
    """
    out: dict[tuple[Any, ...], int] = {}
    table: tuple[Any, ...] = ()
    rule_index = -1
    in_multiline: str | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if in_multiline is not None:
            if s.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        if not s or s.startswith("#"):
            continue
        m = _ARRAY_HEADER.match(s)
        if m:
            name = _unquote(m.group(1))
            if name == "rule":
                rule_index += 1
                table = ("rule", rule_index)
            else:
                table = ("array", name)
            out.setdefault(table, lineno)
            out.setdefault((name.split(".")[0],), lineno)
            continue
        m = _TABLE_HEADER.match(s)
        if m:
            name = _unquote(m.group(1))
            table = ("default",) if name == "default" else ("table", name)
            out.setdefault(table, lineno)
            out.setdefault((name.split(".")[0],), lineno)
            continue
        m = _KEY.match(s)
        if m:
            out.setdefault((*table, _unquote(m.group(1))), lineno)
            rest = s[m.end() :]
            for delim in ('"""', "'''"):
                if rest.count(delim) % 2 == 1:
                    in_multiline = delim
                    break
    return out


def decode_pattern(raw: str, encoding: str) -> bytes:
    """Turn a pattern string from the file into key bytes.

    ``utf-8`` is the text as written; ``hex`` and ``base64`` let a rule name binary
    keys, which TOML strings cannot hold.

    Raises:
        ValueError: the text is not valid in that encoding.
    """
    if encoding == "hex":
        return bytes.fromhex(raw)
    if encoding == "base64":
        return base64.b64decode(raw, validate=True)
    return raw.encode("utf-8")
