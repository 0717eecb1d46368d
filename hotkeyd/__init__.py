"""hotkeyd: find hot Redis keys within a fraction of a second and tell every app.

:func:`native_or_twin` picks, once per C extension, the compiled module or its
pure-Python twin (the sketch, the MONITOR parser, the trace splitter use it).

Moved modules and names (0.2): the old import paths keep working for one release with a
:class:`DeprecationWarning` naming the new one. They are served by one hook here (a
finder on ``sys.meta_path`` for modules, module ``__getattr__`` for names), not by shim
files; the tables are :data:`MOVED_MODULES` and :data:`MOVED_NAMES`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import warnings
from types import FrameType, ModuleType
from typing import Any

from hotkeyd import errors
from hotkeyd.errors import (
    ClientError,
    ConfigError,
    HotkeydError,
    KafkaSourceError,
    MonitorError,
    MonitorPermissionError,
    PublishError,
    RulesError,
    SerializationError,
    SketchError,
    SourceError,
    UnreachableError,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hotkeyd")  # built from VERSION at the repository root
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


__version__ = _version()

__all__ = [
    "ClientError",
    "ConfigError",
    "HotkeydError",
    "KafkaSourceError",
    "MonitorError",
    "MonitorPermissionError",
    "PublishError",
    "RulesError",
    "SerializationError",
    "SketchError",
    "SourceError",
    "UnreachableError",
    "__version__",
    "native_or_twin",
]


def native_or_twin(native: str, twin: str) -> tuple[ModuleType, str]:
    """The module ``native`` (a C extension) or, if it was not built or
    ``HOTKEYD_PURE_PYTHON=1`` is set, its pure-Python twin ``twin``; and which one:
    ``"native"`` or ``"python"``.

    Every extension has a twin with the same API and results, so the choice only
    changes speed; it is made once, at import of the module that asks, and a missing
    build is logged (CI forces the twin in one run so the two cannot drift apart).
    """
    if os.environ.get("HOTKEYD_PURE_PYTHON", "") not in ("", "0"):
        return importlib.import_module(twin), "python"
    try:
        return importlib.import_module(native), "native"
    except ImportError as exc:  # no compiler where this was installed
        logging.getLogger(native).warning(
            "%s (C) unavailable (%s); using the slower pure-Python twin %s", native, exc, twin
        )
        return importlib.import_module(twin), "python"


#: Old module path -> new module path (their submodules follow).
MOVED_MODULES: dict[str, str] = {
    "hotkeyd.wire": "hotkeyd.protocol.wire",
    "hotkeyd.demand": "hotkeyd.protocol.demand",
    "hotkeyd.auth": "hotkeyd.protocol.auth",
    "hotkeyd.keys": "hotkeyd.protocol.keys",
    "hotkeyd.contract": "hotkeyd.protocol.contract",
    "hotkeyd.formats": "hotkeyd.protocol.formats",
    "hotkeyd.lines": "hotkeyd.protocol.lines",
    "hotkeyd.client.idempotency": "hotkeyd.idempotency",
}
_MOVED_ERRORS = (
    "DuplicateCompletionError",
    "IdempotencyError",
    "IdempotencyInProgress",
    "IdempotencyKeyError",
    "IdempotencyMismatch",
    "IdempotencyUnavailable",
    "LeaseLostError",
)
#: Old ``module.name`` -> new ``module.name``, for names that left a module that stays.
MOVED_NAMES: dict[str, str] = {
    f"{home}.{name}": f"hotkeyd.idempotency.errors.{name}"
    for home in ("hotkeyd", "hotkeyd.errors")
    for name in _MOVED_ERRORS
}


def _warn(old: str, new: str) -> None:
    # Point at the importing line: skip this module's frames (``warnings`` itself skips
    # the import machinery's).
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"{old} moved to {new}; the old path goes away in the next release",
        DeprecationWarning,
        stacklevel=level,
    )


def _moved_module(fullname: str) -> str | None:
    for old, new in MOVED_MODULES.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _MovedLoader(importlib.abc.Loader):
    """Hands out the real module under its old name (one module object, not a copy)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(spec.name, self.new)
        module = importlib.import_module(self.new)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.real_spec  # the import system set the alias' spec on it


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the moved modules by their old names (first on ``sys.meta_path``, so a
    submodule of an old package name is never loaded a second time from the new files)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _moved_module(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


def _moved_getattr(module: str) -> Any:
    def __getattr__(name: str) -> Any:
        new = MOVED_NAMES.get(f"{module}.{name}")
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if sys._getframe(1).f_code.co_name != "_handle_fromlist":  # its probe, then the real get
            _warn(f"{module}.{name}", new)
        home, _, attr = new.rpartition(".")
        return getattr(importlib.import_module(home), attr)

    return __getattr__


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
__getattr__ = _moved_getattr(__name__)
setattr(errors, "__getattr__", _moved_getattr(errors.__name__))  # noqa: B010 (mypy: a module has no __getattr__)
