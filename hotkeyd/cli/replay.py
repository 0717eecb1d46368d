"""``hotkeyd replay``: what was hot in recorded traffic (a file or a Kafka time range)."""

from __future__ import annotations

import json
import time

import click

from hotkeyd.cli.common import exit_with, setting_option
from hotkeyd.detector.config import DetectorConfig
from hotkeyd.errors import ConfigError
from hotkeyd.sketch import process_seed


@click.command()
@click.argument("source")
@click.option("--from", "start", default=None, help="Start: Unix s, ISO 8601 (UTC) or 1h (ago).")
@click.option("--to", "end", default=None, help="End (exclusive), same forms [default: the end].")
@click.option(
    "--from-offset", type=click.IntRange(min=0), default=None, help="Kafka: first offset."
)
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="Kafka: stop offset.")
@setting_option("rules", help="Rules TOML file (the daemon's).")
@setting_option("window")
@setting_option("tick")
@setting_option(
    "hash_seed",
    help="Secret seed of the sketch hash [default: random per run]. Give the same seed to "
    "get the same result from the same trace.",
)
@click.option("--ts-field", default="ts", show_default=True, help="JSON lines: timestamp field.")
@click.option("--json", "as_json", is_flag=True, help="The timeline and counts as one JSON object.")
def replay(
    source: str,
    start: str | None,
    end: str | None,
    from_offset: int | None,
    to_offset: int | None,
    rules: str | None,
    window: float,
    tick: float,
    hash_seed: int | None,
    ts_field: str,
    as_json: bool,
) -> None:
    """Run the detector over recorded traffic in event time and print the hot intervals.

    SOURCE is a file (lines of `ts key`, `ts key count`, or JSON lines with a timestamp
    field; `-` is stdin) or a kafka:// URL (read without a group: nothing is committed).

    \b
    Examples:
      hotkeyd replay access-trace.txt --from 2026-11-30T02:55:00Z --to 2026-11-30T03:10:00Z
      hotkeyd replay 'kafka://127.0.0.1:9092/accesses?format=lines' --from 2h --to 1h --json
    """
    from hotkeyd.console.intervals import parse_when, render_intervals
    from hotkeyd.detector.rules import RuleSet, load_rules
    from hotkeyd.replay.source import open_replay

    def go() -> int:
        now = time.time()
        lo = None if start is None else parse_when(start, now=now)
        hi = None if end is None else parse_when(end, now=now)
        if hash_seed is not None and not 0 <= hash_seed < 1 << 64:
            raise ConfigError("hash_seed: must be in [0, 2**64 - 1]")
        seed = process_seed() if hash_seed is None else hash_seed
        config = DetectorConfig(window=window, tick=tick, seed=seed)
        ruleset = load_rules(rules) if rules else RuleSet.default()
        res = open_replay(
            source,
            config,
            ruleset,
            start=lo,
            end=hi,
            from_offset=from_offset,
            to_offset=to_offset,
            ts_field=ts_field,
        )
        if as_json:
            click.echo(json.dumps(res.to_json()))
        else:
            summary = (
                f"{res.events:,} events in {res.seconds:.2f}s "
                f"({res.events_per_second / 1e6:.2f} M events/s); "
                f"{res.late:,} late, {res.malformed:,} malformed"
            )
            click.echo(render_intervals(res.intervals, extra=summary))
        return 0

    exit_with(go)
