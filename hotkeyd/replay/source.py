"""Open what ``hotkeyd replay`` is pointed at (a file, stdin or a kafka:// URL) and replay it."""

from __future__ import annotations

import sys
from typing import IO

from hotkeyd.detector.config import DetectorConfig
from hotkeyd.detector.rules import RuleSet
from hotkeyd.errors import ConfigError, SourceError
from hotkeyd.replay.run import ReplayResult, replay
from hotkeyd.replay.trace import TraceStats, read_trace

__all__ = ["open_replay"]


def open_replay(
    source: str,
    config: DetectorConfig,
    rules: RuleSet,
    *,
    start: float | None = None,
    end: float | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    ts_field: str = "ts",
) -> ReplayResult:
    """Replay ``source`` between ``start`` and ``end`` (Unix s) with ``config`` and ``rules``.

    Raises:
        ConfigError: offsets given for a file, or an unusable URL.
        SourceError: the file cannot be read, or Kafka cannot be reached.
    """
    if source.startswith(("kafka://", "kafkas://", "kafka+ssl://")):
        from hotkeyd.conn.kafka import parse_kafka_url
        from hotkeyd.replay.kafka import read_kafka_range

        stats: dict[str, int] = {}
        batches = read_kafka_range(
            parse_kafka_url(source),
            start=start,
            end=end,
            from_offset=from_offset,
            to_offset=to_offset,
            stats=stats,
            max_key_len=config.max_key_len,
        )
        res = replay(batches, config, rules)
        res.malformed += stats.get("bad", 0)
        return res
    if from_offset is not None or to_offset is not None:
        raise ConfigError("--from-offset/--to-offset apply to Kafka sources only")
    trace = TraceStats()
    f: IO[bytes]
    try:
        f = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115
    except OSError as exc:
        raise SourceError(f"cannot read {source}: {exc.strerror or exc}") from exc
    try:
        res = replay(
            read_trace(f, config.tick, trace, ts_field=ts_field, start=start, end=end),
            config,
            rules,
        )
    except OSError as exc:
        raise SourceError(f"cannot read {source}: {exc.strerror or exc}") from exc
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    res.malformed += trace.malformed
    return res
