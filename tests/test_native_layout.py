"""native/: algorithms in plain C99 files, CPython glue in thin bindings (multi-phase init).

The parsers and the sketch core build and fuzz without Python.h (as mmh3 keeps
``murmurhash3.c`` apart from ``mmh3module.c``); each ``_*module.c`` only converts
arguments, calls them and builds results, and initializes with PEP 489 multi-phase
init (``PyModuleDef_Init`` and slots), so it can load in a sub-interpreter.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
BINDINGS = sorted(NATIVE.glob("_*module.c"))
PLAIN = sorted(p for p in NATIVE.glob("*.[ch]") if p not in BINDINGS)


def test_the_layout_is_found() -> None:
    assert {p.name for p in BINDINGS} >= {
        "_sketchmodule.c",
        "_monitormodule.c",
        "_tracemodule.c",
        "_tickmodule.c",
    }
    assert (NATIVE / "trace_parse.c") in PLAIN


@pytest.mark.parametrize("path", PLAIN, ids=lambda p: p.name)
def test_plain_c_files_do_not_include_python(path: Path) -> None:
    assert not re.search(r"#\s*include\s*[<\"]Python\.h", path.read_text())


@pytest.mark.parametrize("path", BINDINGS, ids=lambda p: p.name)
def test_a_binding_uses_multi_phase_init(path: Path) -> None:
    src = path.read_text()
    assert "PyModuleDef_Init(" in src and "Py_mod_exec" in src
    assert "PyModule_Create(" not in src


def test_the_trace_binding_has_no_parser_of_its_own() -> None:
    src = (NATIVE / "_tracemodule.c").read_text()
    assert '#include "trace_parse.h"' in src
    assert not re.search(r"\bstrtod\(|\bparse_line\(", src)


def test_the_trace_module_loads_twice_as_two_modules() -> None:
    """Multi-phase init: each load makes a fresh module (single-phase shared one def)."""
    mod = pytest.importorskip("hotkeyd.replay._trace")
    spec = importlib.util.find_spec(mod.__name__)
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not mod
    assert other.split_ticks(b"1.5 k\n", 1.0) == mod.split_ticks(b"1.5 k\n", 1.0)
