"""What every command shares: options derived from the settings declarations, the
``--config`` file loader, the Redis options of the reading commands, and the
translation of errors into one line and an exit code.

Each ``run`` option comes from one field of :class:`~hotkeyd.daemon.config.Settings`
(help, default, choices, env var), so the CLI, the config file and library users
share one list of settings.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hotkeyd.daemon.config import Settings, load_config_file
from hotkeyd.errors import ConfigError, HotkeydError

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["config_option", "exit_with", "redis_options", "setting_option", "settings_options"]


def _option_for(f: dataclasses.Field[Any], **overrides: Any) -> Callable[[F], F]:
    meta = f.metadata
    flag = "--" + f.name.replace("_", "-")
    decls = [*(meta.get("flags") or (flag,)), f.name]
    kw: dict[str, Any] = {
        "help": meta.get("help", ""),
        "default": f.default,
        "show_default": f.default is not None,
        "envvar": f"HOTKEYD_{meta.get('env') or f.name.upper()}",
        "show_envvar": True,
    }
    if isinstance(f.default, bool):
        decls[0] = f"{flag}/--no-{f.name.replace('_', '-')}"
    elif meta.get("choices"):
        kw["type"] = click.Choice(list(meta["choices"]), case_sensitive=False)
    elif meta.get("kind") is int:
        kw["type"] = int
    elif isinstance(f.default, (int, float)):
        kw["type"] = type(f.default)
    if meta.get("multiple"):
        kw["multiple"] = True
    kw.update(overrides)
    if "default" in overrides:
        kw["show_default"] = overrides["default"] is not None
    return click.option(*decls, **kw)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def setting_option(name: str, **overrides: Any) -> Callable[[F], F]:
    """The option of :class:`Settings` field ``name``, declared as ``run`` declares it
    (flags, env var, type, help), for another command that takes the same setting.

    ``overrides`` are the click arguments that differ on purpose in that command (e.g.
    a reading command's ``default`` Redis URL, or a ``help`` saying what it is for there).
    """
    return _option_for(_FIELDS[name], **overrides)


def settings_options(fn: F) -> F:
    """Add one option per :class:`Settings` field (plus ``--no-http``) to a command."""
    fn = click.option(
        "--no-http",
        envvar="HOTKEYD_NO_HTTP",
        show_envvar=True,
        is_flag=True,
        default=False,
        help="Do not start the HTTP endpoint.",
    )(fn)
    for f in reversed(dataclasses.fields(Settings)):
        fn = _option_for(f)(fn)
    return fn


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Eager --config: file values become click defaults (below flags and env vars)."""
    if not value:
        return value
    try:
        values = load_config_file(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    if "source" in values and "sources" not in values:
        values["sources"] = values.pop("source")
    params = {p.name: p for p in ctx.command.params if p.name and p.name != "config"}
    unknown = sorted(set(values) - set(params))
    if unknown:
        raise click.BadParameter(
            f"{value}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(params))})",
            ctx=ctx,
            param=param,
        )
    for name, raw in values.items():
        try:
            values[name] = params[name].type_cast_value(ctx, raw)
        except click.BadParameter as exc:
            raise click.BadParameter(
                f"{value}: {name}: {exc.message}", ctx=ctx, param=param
            ) from exc
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


config_option = click.option(
    "--config",
    type=click.Path(dir_okay=False),
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    envvar="HOTKEYD_CONFIG",
    show_envvar=True,
    help="TOML config file whose keys are option names (e.g. max_hot = 500).",
)


def exit_with(fn: Callable[[], int | None]) -> None:
    """Run ``fn`` and exit with its code; Ctrl-C exits 0.

    A :class:`HotkeydError` becomes one line on stderr, ``hotkeyd: error: ...``, and
    exit code 2 for configuration problems (:class:`ConfigError`), 1 otherwise.
    """
    try:
        code = fn() or 0
    except HotkeydError as exc:
        click.echo(f"hotkeyd: error: {exc}", err=True)
        code = 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:
        code = 0
    sys.exit(code)


def redis_options(fn: F) -> F:
    """``--redis-url`` and ``--namespace`` of the commands that read what a daemon wrote."""
    fn = setting_option("namespace")(fn)
    return setting_option(
        "redis_url", default="redis://127.0.0.1:6379/0", help="Redis the daemon publishes to."
    )(fn)
