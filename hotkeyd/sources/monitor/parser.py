"""The MONITOR parser implementation in use: the C extension, or its pure-Python twin.

Chosen once at import: ``hotkeyd.sources.monitor._monitor`` when it was built, else
``hotkeyd.sources.monitor._monitor_py``. ``HOTKEYD_PURE_PYTHON=1`` forces the twin (CI runs the tests
both ways so the two cannot drift apart).
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

__all__ = ["IMPLEMENTATION", "Parser", "Table", "extract", "impl"]

logger = logging.getLogger(__name__)


def _choose() -> tuple[ModuleType, str]:
    from hotkeyd.sources.monitor import _monitor_py

    if os.environ.get("HOTKEYD_PURE_PYTHON", "") not in ("", "0"):
        return _monitor_py, "python"
    try:
        from hotkeyd.sources.monitor import _monitor
    except ImportError:
        logger.warning(
            "hotkeyd.sources.monitor._monitor (C) not built; the MONITOR tap uses the slower Python twin"
        )
        return _monitor_py, "python"
    return _monitor, "c"


impl, IMPLEMENTATION = _choose()
Parser = impl.Parser
Table = impl.Table
extract = impl.extract
