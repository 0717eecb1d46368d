"""README's option table is the one the click declarations give (scripts/options_table.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "options_table", ROOT / "scripts" / "options_table.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_table_is_generated_from_the_declarations() -> None:
    script = _script()
    readme = (ROOT / "README.md").read_text()
    assert script.render(readme) == readme, "run: python scripts/options_table.py"


def test_every_run_option_has_a_row() -> None:
    from hotkeyd.cli import run

    table = _script().table()
    for p in run.params:
        assert f"`{p.opts[0]}" in table, p.opts
    for flag in ("--sharded-pubsub", "--auth-key-file", "--monitor-max-line"):
        assert f"`{flag}" in table


def test_a_stale_table_is_caught() -> None:
    script = _script()
    readme = (ROOT / "README.md").read_text()
    stale = readme.replace("| `--monitor-max-line`", "| `--monitor-max-lines`", 1)
    assert stale != readme and script.render(stale) != stale
