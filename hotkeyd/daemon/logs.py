"""Logging set-up for the ``hotkeyd`` commands: one format, to stderr."""

from __future__ import annotations

import logging
import sys

__all__ = ["configure_logging"]


def configure_logging(level: str) -> None:
    """Log at ``level`` (DEBUG, INFO, WARNING, ERROR) to stderr.

    kafka-python logs an ERROR line for every reconnect attempt, while hotkeyd's Kafka
    source reports connection trouble itself at a limited rate: its logger is quiet
    unless ``level`` is DEBUG, when everything it says is shown.
    """
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(
        level=numeric,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger().setLevel(numeric)
    logging.getLogger("kafka").setLevel(
        logging.DEBUG if numeric <= logging.DEBUG else logging.CRITICAL
    )
