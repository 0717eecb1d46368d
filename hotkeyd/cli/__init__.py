"""The ``hotkeyd`` command: a table of contents over the library.

Each command parses its options, calls one library function and returns an exit code.
Every :class:`~hotkeyd.errors.HotkeydError` becomes one clear line on stderr and a
non-zero exit (2 for configuration, 1 otherwise), never a traceback. A new command is
a few lines here over a function in the library (:mod:`hotkeyd.console` for the
operator's views).
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

# The app-side install (`pip install hotkeyd`) has the client only; the commands need the
# daemon extra. One line says so, instead of a traceback from the first missing import.
_MISSING = [m for m in ("click", "prometheus_client") if find_spec(m) is None]
if _MISSING:
    raise SystemExit(
        f"hotkeyd: the command-line tools need the daemon extra ({', '.join(_MISSING)} "
        "not installed): pip install 'hotkeyd[daemon]'"
    )

from hotkeyd.daemon.signals import install_early, take_early  # noqa: E402

install_early(sys.argv)  # before the imports below: see hotkeyd.daemon.signals

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import click  # noqa: E402

from hotkeyd import __version__  # noqa: E402
from hotkeyd.cli.common import (  # noqa: E402
    config_option,
    exit_with,
    redis_options,
    setting_option,
    settings_options,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="hotkeyd")
def cli() -> None:
    """hotkeyd: find hot Redis keys in a fraction of a second and tell every app.

    Every `run` option can also be set with a HOTKEYD_* environment variable (shown in
    each option's help) or in a TOML file given with --config. Precedence:
    flag > environment > config file > default.
    """


@cli.command()
@config_option
@settings_options
@click.option("--print-config", is_flag=True, help="Print the resolved settings as JSON and exit.")
def run(print_config: bool, **opts: Any) -> None:
    """Run the detection daemon.

    \b
    Examples:
      cat keys.txt | hotkeyd run
      hotkeyd run -s access.log --follow --redis-url redis://127.0.0.1:6379/0
      hotkeyd run -s 'kafka://127.0.0.1:9092/accesses?group=hotkeyd&format=lines' --redis-url ...
      hotkeyd run -s redis-monitor://127.0.0.1:6379 --monitor-duty 0.2 --redis-url ...
    """
    from hotkeyd.daemon.signals import SignalLatch

    with take_early() or SignalLatch() as latch:  # a SIGHUP during start-up must not kill us
        from hotkeyd.daemon.config import Settings
        from hotkeyd.daemon.logs import configure_logging
        from hotkeyd.daemon.service import Service, run_until_signalled

        def go() -> int:
            settings = Settings.from_mapping(opts)
            if print_config:
                click.echo(json.dumps(settings.redacted(), default=str, indent=2))
                return 0
            configure_logging(settings.log_level)
            return run_until_signalled(Service(settings), latch)

        exit_with(go)


@cli.command()
@redis_options
@click.option(
    "--http",
    default=None,
    help="Read a daemon's HTTP endpoint instead, e.g. http://127.0.0.1:9108.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", "-w", is_flag=True, help="Refresh in place, like top.")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="Refresh interval for --watch, seconds.",
)
@click.option(
    "-n", "limit", default=30, show_default=True, type=click.IntRange(min=1), help="Rows to show."
)
def top(
    redis_url: str,
    namespace: str,
    http: str | None,
    as_json: bool,
    watch: bool,
    interval: float,
    limit: int,
) -> None:
    """Show the hot keys and the top keys by rate."""
    from hotkeyd.console.text import render_top
    from hotkeyd.console.top import TopReader

    def go() -> int:
        with TopReader(redis_url, namespace, http) as reader:
            while True:
                data = reader.read()
                out = json.dumps(data) if as_json else render_top(data, limit)
                click.echo("\x1b[H\x1b[2J" + out if watch and not as_json else out)
                if not watch:
                    return 0
                time.sleep(interval)

    exit_with(go)


@cli.command()
@redis_options
@setting_option("channel")
@click.option(
    "--json", "as_json", is_flag=True, help="Print each message as received (one JSON per line)."
)
@click.option(
    "--count",
    default=0,
    type=click.IntRange(min=0),
    help="Exit after this many messages (0 = forever).",
)
@setting_option("sharded_pubsub", help="SSUBSCRIBE: the daemon runs with --sharded-pubsub.")
def watch(
    redis_url: str,
    namespace: str,
    channel: str | None,
    as_json: bool,
    count: int,
    sharded_pubsub: bool,
) -> None:
    """Subscribe to the events channel and print hot/cool events as they arrive.

    A lost connection is reported on stderr and re-established with backoff; events
    published while disconnected are not replayed (run `hotkeyd top` for the state).
    """
    from hotkeyd.conn.redis import connect
    from hotkeyd.console.events import follow_channel
    from hotkeyd.console.text import watch_lines
    from hotkeyd.protocol.wire import Namespace

    def show(data: bytes | str) -> None:
        text, is_error = watch_lines(data, as_json=as_json)
        click.echo(text, err=is_error)

    def go() -> int:
        channel_name = Namespace(prefix=namespace, channel_override=channel).channel
        client = connect(redis_url, check=False)
        try:
            notice = lambda line: click.echo(f"! {line}", err=True)  # noqa: E731
            follow_channel(client, channel_name, show, count=count, notice=notice,
                           where=redis_url, sharded=sharded_pubsub)  # fmt: skip
        finally:
            client.close()
        return 0

    exit_with(go)


@cli.command()
@click.option(
    "--http",
    default=lambda: f"http://127.0.0.1:{os.environ.get('HOTKEYD_HTTP_PORT', '9108')}",
    show_default="http://127.0.0.1:$HOTKEYD_HTTP_PORT (9108)",
    envvar="HOTKEYD_CHECK_URL",
    show_envvar=True,
    help="Daemon HTTP endpoint to probe.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Also fail when the daemon runs degraded (Redis or a source unreachable).",
)
@setting_option("redis_url", help="Instead, check that a daemon heartbeat is fresh in this Redis.")
@setting_option("namespace", help="Prefix of every Redis name (with --redis-url).")
@click.option(
    "--max-age",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="With --redis-url: newest heartbeat must be this recent, seconds.",
)
def check(http: str, strict: bool, redis_url: str | None, namespace: str, max_age: float) -> None:
    """Health check for orchestrators: exit 0 when healthy, 1 when not.

    The daemon is unhealthy when its loop has stopped ticking. It is *degraded*, not
    unhealthy, while Redis or a source is unreachable: it keeps detecting and retries,
    and restarting it would not help. --strict fails on degraded too.
    """
    from hotkeyd.conn.redis import connect
    from hotkeyd.console.health import check_heartbeat, check_http
    from hotkeyd.protocol.wire import Namespace

    def go() -> int:
        if not redis_url:
            click.echo(check_http(http, strict=strict))
            return 0
        client = connect(redis_url, check=False)
        try:
            click.echo(check_heartbeat(client, Namespace(prefix=namespace), max_age=max_age))
        finally:
            client.close()
        return 0

    exit_with(go)


@cli.command()
@click.option("--duration", default=14.0, show_default=True, help="Seconds to run.")
@click.option(
    "--rate", default=150_000.0, show_default=True, help="Background accesses per second."
)
@click.option(
    "--keys", "universe", default=100_000, show_default=True, help="Distinct background keys."
)
@click.option("--alpha", default=1.0, show_default=True, help="Zipf skew of the background.")
@click.option("--no-redis", is_flag=True, help="Do not start redis-server; publish in-process.")
@click.option("--plain", is_flag=True, help="One status line per second instead of a live view.")
def demo(
    duration: float, rate: float, universe: int, alpha: float, no_redis: bool, plain: bool
) -> None:
    """See hotkeyd work: a Zipf workload where one key turns hot, then cools.

    Starts a throwaway redis-server on a free port if one is installed, runs the
    daemon and a subscribed app in this process, and shows the top keys live.
    """
    from hotkeyd.console.demo import run_demo
    from hotkeyd.daemon.logs import configure_logging

    configure_logging("WARNING")

    def go() -> int:
        s = run_demo(duration=duration, rate=rate, universe=universe, alpha=alpha,
                     use_redis=not no_redis, live=False if plain else None)  # fmt: skip
        return 0 if s.detection_latency is not None else 1

    exit_with(go)


from hotkeyd.cli.history import history  # noqa: E402 - the group must exist first
from hotkeyd.cli.replay import replay  # noqa: E402

cli.add_command(history)
cli.add_command(replay)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="hotkeyd")


if __name__ == "__main__":  # pragma: no cover
    main()
