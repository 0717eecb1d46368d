"""An option another command shares with ``run`` is ``run``'s declaration, not a copy.

watch, check, replay, top and history take some of the daemon's settings (Redis URL,
namespace, channel, sharded pub/sub, rules, window, tick). Each must read the same
environment variable, with the same flags and type, as ``hotkeyd run`` does; only the
help and default may say what differs there.
"""

from __future__ import annotations

import click
import pytest

from hotkeyd.cli import cli, run


def _options(cmd: click.Command) -> dict[str, click.Option]:
    return {p.name: p for p in cmd.params if isinstance(p, click.Option) and p.name}


RUN = _options(run)


def _commands() -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in cli.commands.items():
        if name == "run":
            continue
        if isinstance(cmd, click.Group):
            out.update({f"{name} {n}": c for n, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


SHARED = [
    (name, opt)
    for name, cmd in sorted(_commands().items())
    for opt in sorted(_options(cmd))
    if opt in RUN
    and opt not in ("http",)
    # `top --watch` (refresh in place) predates run's `--watch/--no-watch` (the data-Redis
    # watch): the same parameter name, two different options.
    and (name, opt) != ("top", "watch")
]


def test_the_shared_options_are_found() -> None:
    found = {(c, o) for c, o in SHARED}
    assert {("watch", "channel"), ("watch", "sharded_pubsub"), ("replay", "window")} <= found
    assert {("check", "redis_url"), ("replay", "rules"), ("top", "namespace")} <= found


@pytest.mark.parametrize(("command", "name"), SHARED)
def test_a_shared_option_is_declared_as_run_declares_it(command: str, name: str) -> None:
    mine = _options(_commands()[command])[name]
    theirs = RUN[name]
    assert mine.envvar == theirs.envvar
    assert (mine.opts, mine.secondary_opts) == (theirs.opts, theirs.secondary_opts)
    assert repr(mine.type) == repr(theirs.type)
    assert mine.multiple == theirs.multiple and mine.is_flag == theirs.is_flag
