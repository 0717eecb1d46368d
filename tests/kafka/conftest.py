"""Kafka test setup.

kafka-python 3.0 calls the deprecated ``importlib.resources.read_text``/``open_text`` while its modules
are imported; with ``filterwarnings = error`` that would fail collection, so kafka-python
is imported once here with that one warning silenced. Nothing else is filtered.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="(read|open)_text is deprecated", category=DeprecationWarning
    )
    import kafka
    import kafka.admin
    import kafka.consumer.group
    import kafka.producer  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def _collect_leaked_sockets_at_end() -> Iterator[None]:
    """Same as below, once after the whole session (log records may have held them)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def kafka_python_socket_leaks() -> Iterator[None]:
    """Collect, silently, the sockets kafka-python 3.0 leaks when a connect attempt fails.

    Its ``KafkaNetSocket.connect`` does not close the socket when the connection is refused,
    so tests that stop the broker leave unclosed sockets whose ResourceWarning would surface
    at interpreter exit (an error under ``filterwarnings = error``). Used with a
    ``filterwarnings`` mark for the ones freed while the test runs. Not our code's leak.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
