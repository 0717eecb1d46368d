"""``hotkeyd history``: what was hot, when, for how long and at what peak."""

from __future__ import annotations

import json
import time

import click

from hotkeyd.cli.common import exit_with, redis_options


@click.command()
@redis_options
@click.option(
    "--since",
    default="1h",
    show_default=True,
    help="Start: a duration ago (15m, 1h, 4d), Unix seconds or ISO 8601 (UTC).",
)
@click.option("--until", default=None, help="End (same forms as --since) [default: now].")
@click.option("--key", "pattern", default=None, help="Only keys matching this glob (item:*).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per interval.")
def history(
    redis_url: str,
    namespace: str,
    since: str,
    until: str | None,
    pattern: str | None,
    as_json: bool,
) -> None:
    """Show hot intervals from the daemon's history stream (<namespace>:history).

    Every hot/cool transition is recorded by the running daemon (capped by count and age:
    see `hotkeyd run --history-maxlen/--history-max-age`).
    """
    from hotkeyd.conn.redis import connect
    from hotkeyd.console.intervals import intervals_json, parse_when, render_intervals
    from hotkeyd.protocol.wire import Namespace
    from hotkeyd.publish.history import read_history

    def go() -> int:
        now = time.time()
        lo = parse_when(since, now=now)
        hi = None if until is None else parse_when(until, now=now)
        client = connect(redis_url)
        try:
            rows = read_history(
                client,
                Namespace(prefix=namespace),
                since=lo,
                until=hi,
                pattern=None if pattern is None else pattern.encode("utf-8", "surrogateescape"),
            )
        finally:
            client.close()
        if as_json:
            for row in intervals_json(rows):
                click.echo(json.dumps(row))
        else:
            click.echo(render_intervals(rows))
        return 0

    exit_with(go)
