"""Replay for post-mortems: run the daemon's detector over recorded traffic in event time.

``hotkeyd replay`` answers "what was hot between 02:55 and 03:10?" from a timestamped
file (:mod:`hotkeyd.replay.trace`) or a Kafka time range (:mod:`hotkeyd.replay.kafka`),
as fast as the CPU allows (:mod:`hotkeyd.replay.run`).
"""

from __future__ import annotations

from hotkeyd.replay.run import ReplayResult, replay

__all__ = ["ReplayResult", "replay"]
