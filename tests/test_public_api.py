"""The public API stays honest: sorted ``__all__``, every name importable, one error root."""

from __future__ import annotations

import importlib
import inspect

import pytest

import hotkeyd
from hotkeyd import errors

PUBLIC = [
    "hotkeyd",
    "hotkeyd.client",
    "hotkeyd.client.idempotency",
    "hotkeyd.demand",
    "hotkeyd.errors",
    "hotkeyd.wire",
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
