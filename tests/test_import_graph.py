"""The import graph has no cycles, at module or package level, and the client stays app-side.

The graph is read from the source (every ``import`` anywhere in a module, function-level
and ``TYPE_CHECKING`` ones included: a lazy import that only dodges a cycle is still a
cycle in the design). A package's ``__init__`` importing its own modules is not a cycle (a
module does not depend on its package), but a module importing names from its own
package's ``__init__``, which imports that module, is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

import hotkeyd

ROOT = Path(hotkeyd.__file__).parent
APP_SIDE = tuple(  # what apps import: the SDK, the guard, the wire contract
    f"hotkeyd.{p}{end}" for p in ("client", "idempotency", "protocol") for end in ("", ".")
)
APP_SIDE_FORBIDDEN = ("hotkeyd.daemon", "hotkeyd.sources", "hotkeyd.detector", "hotkeyd.publish")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["hotkeyd", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    for stub in ROOT.rglob("*.pyi"):  # C extensions (their stubs): leaves, built or not
        parts = ["hotkeyd", *stub.relative_to(ROOT).with_suffix("").parts]
        out.setdefault(".".join(parts), stub)
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module ``name`` refers to (a name inside a module resolves to the module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> Iterable[str]:
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module if is_pkg else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t == "hotkeyd" or t.startswith("hotkeyd."):
                resolved = _resolve(t)
                if resolved and resolved != module:
                    yield resolved


def module_graph() -> dict[str, set[str]]:
    return {m: set(_imports(m, p)) if p.suffix == ".py" else set() for m, p in MODULES.items()}


def _package(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def package_graph(depth: int) -> dict[str, set[str]]:
    """Modules collapsed into their package ``depth`` levels down (2: hotkeyd.sources)."""
    graph: dict[str, set[str]] = {}
    for src, dsts in module_graph().items():
        a = _package(src, depth)
        for dst in dsts:
            b = _package(dst, depth)
            # a package importing its own child is not a package-level edge
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                graph.setdefault(a, set()).add(b)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read_from_every_module() -> None:
    graph = module_graph()
    assert len(graph) >= 60
    assert "hotkeyd.protocol.wire" in graph["hotkeyd.client.subscriber"]  # edges are really found
    assert "hotkeyd.detector.rules" in graph["hotkeyd.detector.detector"]


def test_no_module_level_cycles() -> None:
    assert find_cycles(module_graph()) == []


@pytest.mark.parametrize("depth", [2, 3])
def test_no_package_level_cycles(depth: int) -> None:
    assert find_cycles(package_graph(depth)) == []


def test_the_client_imports_nothing_of_the_daemon_side() -> None:
    graph = module_graph()
    bad = {
        (src, dst)
        for src, dsts in graph.items()
        if src.startswith(APP_SIDE)
        for dst in dsts
        if dst.startswith(APP_SIDE_FORBIDDEN)
    }
    assert bad == set()


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"p": {"p.x"}, "p.x": set()}) == []
    assert find_cycles({"p": {"p.x"}, "p.x": {"p"}}) == [["p", "p.x"]]


def test_the_top_of_the_package_is_the_shared_kernel() -> None:
    """At most 8 top-level modules; a subsystem with several modules is a folder."""
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 8, top
    assert "wire.py" not in top and "testing.py" not in top  # (moved: protocol/, testing/)


# The pure-Python twins of C code mirror their C file function by function; the
# detector's per-tick path is rewritten by the detector-speed work.
LONG_ALLOWED = {"_sketch_py.py", "_monitor_py.py", "_trace_py.py", "detector/detector.py"}


def test_no_module_is_over_700_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 700
        and p.name not in LONG_ALLOWED
        and str(p.relative_to(ROOT)) not in LONG_ALLOWED
    }
    assert long == {}
