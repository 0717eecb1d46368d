"""Every import path that moved keeps working for one release, with a warning naming the new one.

The old paths are served by the one hook in ``hotkeyd/__init__.py`` (no shim files): each
test imports an old path in a fresh interpreter state for that name and checks that it
warns once, names the new path, and hands out the very same object as the new path.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import hotkeyd

OLD_MODULES = {
    "hotkeyd.wire": "hotkeyd.protocol.wire",
    "hotkeyd.demand": "hotkeyd.protocol.demand",
    "hotkeyd.auth": "hotkeyd.protocol.auth",
    "hotkeyd.keys": "hotkeyd.protocol.keys",
    "hotkeyd.contract": "hotkeyd.protocol.contract",
    "hotkeyd.formats": "hotkeyd.protocol.formats",
    "hotkeyd.lines": "hotkeyd.protocol.lines",
    "hotkeyd.client.idempotency": "hotkeyd.idempotency",
    "hotkeyd.client.idempotency.guard": "hotkeyd.idempotency.guard",
    "hotkeyd.client.idempotency.store": "hotkeyd.idempotency.store",
}
ERRORS = [
    "DuplicateCompletionError",
    "IdempotencyError",
    "IdempotencyInProgress",
    "IdempotencyKeyError",
    "IdempotencyMismatch",
    "IdempotencyUnavailable",
    "LeaseLostError",
]


@pytest.fixture
def forget_old() -> Iterator[None]:
    """Drop old names from sys.modules and their parents, so the next import resolves anew."""

    def forget() -> None:
        olds = tuple(hotkeyd.MOVED_MODULES)
        for old in [
            m for m in sys.modules if m in olds or m.startswith(tuple(o + "." for o in olds))
        ]:
            del sys.modules[old]
            parent, _, child = old.rpartition(".")
            if parent in sys.modules and child in vars(sys.modules[parent]):
                delattr(sys.modules[parent], child)

    forget()
    yield
    forget()


@pytest.mark.parametrize("old", sorted(OLD_MODULES))
def test_an_old_module_path_warns_and_is_the_new_module(old: str, forget_old: None) -> None:
    new = OLD_MODULES[old]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    ours = [w for w in caught if str(w.message).startswith(f"{old} moved to {new};")]
    assert len(ours) == 1 and ours[0].category is DeprecationWarning
    assert {w.category for w in caught} == {DeprecationWarning}  # (and its old parent's)
    assert mod is importlib.import_module(new)
    assert mod.__name__ == new and mod.__spec__ is not None and mod.__spec__.name == new


def test_the_old_from_import_forms_warn(forget_old: None) -> None:
    """``from hotkeyd import wire`` and ``from hotkeyd.wire import X``, as README had them."""
    from hotkeyd.protocol.wire import Namespace

    with pytest.warns(DeprecationWarning, match="hotkeyd.contract moved to"):
        from hotkeyd import contract
    assert contract is importlib.import_module("hotkeyd.protocol.contract")
    with pytest.warns(DeprecationWarning, match="hotkeyd.wire moved to") as caught:
        from hotkeyd.wire import Namespace as Old
    assert Old is Namespace
    assert Path(caught[0].filename).name == Path(__file__).name  # points at the import line


@pytest.mark.parametrize("name", ERRORS)
@pytest.mark.parametrize("home", ["hotkeyd", "hotkeyd.errors"])
def test_an_idempotency_error_at_its_old_home_warns(home: str, name: str) -> None:
    from hotkeyd.idempotency import errors as new_home

    module = importlib.import_module(home)
    with pytest.warns(DeprecationWarning, match=rf"{home}.{name} moved to hotkeyd\.idempotency"):
        cls = getattr(module, name)
    assert cls is getattr(new_home, name)
    assert name not in module.__all__


def test_an_old_path_warns_once_per_import_statement() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        from hotkeyd import LeaseLostError  # noqa: F401
    assert len(caught) == 1


def test_unknown_names_still_fail() -> None:
    with pytest.raises(AttributeError):
        hotkeyd.NoSuchThing  # noqa: B018
    with pytest.raises(ModuleNotFoundError), pytest.warns(DeprecationWarning):
        importlib.import_module("hotkeyd.client.idempotency.nosuchmodule")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hotkeyd.nosuchmodule")


def test_no_shim_files_are_left() -> None:
    root = Path(hotkeyd.__file__).parent
    for old in hotkeyd.MOVED_MODULES:
        rel = Path(*old.split(".")[1:])
        assert not rel.with_suffix(".py").exists() and not (root / rel).exists(), old
        assert not (root / rel).with_suffix(".py").exists(), old


def test_the_testing_helpers_keep_their_path() -> None:
    """``hotkeyd.testing`` became a package; every name it had is still importable from it."""
    import hotkeyd.testing as t

    for name in [
        "ExactSketch",
        "KafkaBroker",
        "ListSource",
        "PostgresServer",
        "RedisClusterServers",
        "RedisServer",
        "free_port",
        "paced_get_load",
        "postgres_bindir",
        "server_binary",
        "wait_for_port",
    ]:
        assert hasattr(t, name), name
