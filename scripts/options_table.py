"""Write README's table of ``hotkeyd run`` options from the click declarations.

The table sits between ``<!-- options:begin -->`` and ``<!-- options:end -->`` in
README.md. Every row comes from the command's declared options (which come from the
fields of ``Settings``), so a new option cannot be missing from the README:
``tests/docs/test_options_table.py`` fails when the README drifts.

    python scripts/options_table.py          # rewrite README.md
    python scripts/options_table.py --check  # exit 1 if README.md is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"
_DEFAULT_IN_HELP = re.compile(r"\s*\[default: ([^\]]+)\]")


def _default(p: click.Option, help_text: str) -> str:
    shown = _DEFAULT_IN_HELP.search(help_text)
    if shown:
        return f"`{shown.group(1)}`"
    value = p.default
    if p.is_flag or isinstance(value, bool):
        return "on" if value is True else "off"
    if value is None or not isinstance(value, (str, int, float, tuple, list)):
        return "—"
    if isinstance(value, (tuple, list)):
        value = " ".join(str(v) for v in value)
    return f"`{value}`"


def table() -> str:
    """The Markdown table of the ``run`` command's options."""
    from hotkeyd.cli import run

    rows = ["| option | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for p in run.params:
        if not isinstance(p, click.Option):
            continue
        names = ", ".join(
            f"`{o}`" for o in sorted(p.opts, key=lambda o: (not o.startswith("--"), o))
        )
        if p.secondary_opts:
            names = f"`{p.opts[0]}/{p.secondary_opts[0]}`"
        help_text = " ".join((p.help or "").replace("\b", "").split())
        env = f"`{p.envvar}`" if isinstance(p.envvar, str) else "—"
        meaning = _DEFAULT_IN_HELP.sub("", help_text)
        if isinstance(p.type, click.Choice):
            meaning += " One of: " + ", ".join(f"`{c}`" for c in p.type.choices) + "."
        meaning = meaning.replace("|", "\\|")
        rows.append(f"| {names} | {env} | {_default(p, help_text)} | {meaning} |")
    return "\n".join(rows) + "\n"


def render(readme: str) -> str:
    """``readme`` with the table between the markers replaced by the current one."""
    head, sep, rest = readme.partition(BEGIN + "\n")
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"README.md lacks the {BEGIN} ... {END} markers")
    return head + sep + table() + sep2 + tail


def main(argv: list[str]) -> int:
    old = README.read_text()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print("README.md's option table is stale: run python scripts/options_table.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
