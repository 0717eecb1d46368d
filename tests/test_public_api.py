"""The public API stays honest: sorted ``__all__``, every name importable, one error root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import hotkeyd
from hotkeyd import errors

PUBLIC = [
    "hotkeyd",
    "hotkeyd.client",
    "hotkeyd.idempotency",
    "hotkeyd.idempotency.schemes",
    "hotkeyd.protocol.demand",
    "hotkeyd.errors",
    "hotkeyd.protocol.wire",
    "hotkeyd.sketch",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_importable(name: str) -> None:
    mod = importlib.import_module(name)
    names = list(mod.__all__)
    # isort-style order (ruff RUF022): CONSTANTS, then Classes, then functions.
    order = sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[:1].isupper() else 2, n))
    assert names == order, f"{name}.__all__ is not sorted"
    for attr in names:
        assert hasattr(mod, attr), f"{name}.{attr} is listed but missing"


def _every_module() -> list[str]:
    """Every module of the package (``__main__`` runs the CLI, so it is read, not imported)."""
    names = [m.name for m in pkgutil.walk_packages(hotkeyd.__path__, "hotkeyd.")]
    return [n for n in names if not n.endswith("__main__")]


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in _every_module():
        mod = importlib.import_module(name)
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                found.append(obj)
    return found


def test_every_exception_the_package_defines_derives_from_the_one_root() -> None:
    """Every module, private classes included: ``except HotkeydError`` catches them all."""
    classes = _exception_classes()
    assert len(classes) >= 15
    assert {c.__module__ for c in classes} > {errors.__name__}  # really walked the package
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, hotkeyd.HotkeydError)
    ]
    assert outside == []


def test_a_monitor_outage_is_an_unreachable_error() -> None:
    from hotkeyd.protocol.wire import WireError
    from hotkeyd.sources.monitor.conn import RespError, Unreachable

    assert issubclass(Unreachable, errors.UnreachableError)
    assert issubclass(Unreachable, errors.MonitorError)
    assert issubclass(RespError, errors.MonitorError)
    assert issubclass(WireError, hotkeyd.HotkeydError)


def test_every_error_derives_from_the_one_root() -> None:
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__
    ]
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, hotkeyd.HotkeydError), cls
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.SketchError, ValueError)
    assert issubclass(errors.UnreachableError, ConnectionError)


def test_every_error_is_exported_from_the_package() -> None:
    for name in errors.__all__:
        assert getattr(hotkeyd, name) is getattr(errors, name)


def test_dead_code_stays_gone() -> None:
    """Removed as unused (issue 10): each was read only by tests, or by nothing."""
    import hotkeyd.console.demo as demo
    from hotkeyd.batch import Batch
    from hotkeyd.client.hotset import HotSet as ClientHotSet
    from hotkeyd.detector.state import HotCoolStates

    assert not hasattr(demo, "_message_printer")
    assert not hasattr(HotCoolStates, "remove_all")
    assert not hasattr(ClientHotSet, "forget_instance")
    assert "meta" not in Batch.__slots__  # no dict allocated per batch


def test_the_runtime_needs_no_numpy() -> None:
    """numpy was a runtime dependency only for the demo's workload generator."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "from hotkeyd.sources.synthetic import SyntheticSource\n"
        "import hotkeyd.cli, hotkeyd.daemon.service, hotkeyd.client\n"
        "src = SyntheticSource(rate=1000, universe=100, duration=0.05)\nsrc.start()\n"
        "import time; time.sleep(0.06)\n"
        "assert src.next_batch(0.0)[0].lines.count(b'\\n') >= 40\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_detector_and_the_client_name_their_hot_sets_apart() -> None:
    """Two classes called HotSet (the detector's state machine, the app's view) were one
    grep away from being confused: one name each."""
    import hotkeyd.client.hotset
    import hotkeyd.detector.state

    assert hotkeyd.client.hotset.HotSet.__name__ == "HotSet"
    assert hotkeyd.detector.state.HotCoolStates.__name__ == "HotCoolStates"
    assert not hasattr(hotkeyd.detector.state, "HotSet")
