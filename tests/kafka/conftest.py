"""Kafka test setup.

kafka-python 3.0 calls the deprecated ``importlib.resources.read_text``/``open_text`` while its modules
are imported; with ``filterwarnings = error`` that would fail collection, so kafka-python
is imported once here with that one warning silenced. Nothing else is filtered.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="(read|open)_text is deprecated", category=DeprecationWarning
    )
    import kafka
    import kafka.admin
    import kafka.consumer.group
    import kafka.producer  # noqa: F401
