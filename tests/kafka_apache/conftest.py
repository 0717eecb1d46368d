"""Apache Kafka compatibility suite: one real KRaft broker for the session.

The broker's jars are fetched by ``make kafka-jars`` (``make test`` runs it). Without
them the suite is skipped locally and fails under CI (``CI`` set), like every
integration test here. kafka-python is imported once with its deprecation warning
silenced (see tests/kafka/conftest.py).
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="(read|open)_text is deprecated", category=DeprecationWarning
    )
    import kafka
    import kafka.admin
    import kafka.consumer.group
    import kafka.producer  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "kafka"))  # kafka_testutil: shared helpers
sys.path.insert(0, str(Path(__file__).parents[1]))  # service.daemon, replay.trace_gen

from apache_broker import ApacheKafka, jars_present

_BROKER: list[ApacheKafka] = []  # the session's broker, for the failure reports below
_LOG_TAIL = 150  # lines of the broker's log shown under a failed test


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[ApacheKafka]:
    if not jars_present():
        msg = "Apache Kafka jars missing: run `make kafka-jars` (Java 17 and Maven)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    with ApacheKafka() as kb:
        _BROKER.append(kb)
        try:
            yield kb
        finally:
            _BROKER.remove(kb)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the tail of the broker's own log (group coordination,
    rebalances): the broker's directory is deleted at the end of the session."""
    report = yield
    if report.failed and _BROKER:
        path = _BROKER[0].dir / "broker.log"
        try:
            lines = path.read_text(errors="replace").splitlines()[-_LOG_TAIL:]
        except OSError as exc:
            lines = [f"(cannot read {path}: {exc})"]
        report.sections.append(("Apache Kafka broker.log (tail)", "\n".join(lines)))
    return report


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
