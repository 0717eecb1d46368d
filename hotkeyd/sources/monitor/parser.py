"""The MONITOR parser implementation in use: the C extension, or its pure-Python twin.

Chosen once at import: ``hotkeyd.sources.monitor._monitor`` when it was built, else
``hotkeyd.sources.monitor._monitor_py``. ``HOTKEYD_PURE_PYTHON=1`` forces the twin (CI runs the tests
both ways so the two cannot drift apart).
"""

from __future__ import annotations

import logging

from hotkeyd import native_or_twin

__all__ = ["IMPLEMENTATION", "Parser", "Table", "extract", "impl"]

logger = logging.getLogger(__name__)


impl, IMPLEMENTATION = native_or_twin(
    "hotkeyd.sources.monitor._monitor", "hotkeyd.sources.monitor._monitor_py"
)
Parser = impl.Parser
Table = impl.Table
extract = impl.extract
