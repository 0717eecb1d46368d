"""The early signal latch is installed for ``hotkeyd run`` only, whatever the other arguments."""

from __future__ import annotations

import signal

import pytest

from hotkeyd.daemon.signals import install_early, take_early


@pytest.mark.parametrize(
    "argv",
    [
        ["hotkeyd", "watch", "--channel", "run"],  # an option value, not the command
        ["hotkeyd", "top", "run"],
        ["hotkeyd", "replay", "-s", "run", "--rules", "r.toml"],
        ["hotkeyd"],
        ["hotkeyd", "--help"],
    ],
)
def test_no_latch_unless_the_command_is_run(argv: list[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    install_early(argv)
    latch = take_early()
    if latch is not None:
        latch.__exit__(None, None, None)
    assert latch is None, f"{argv} would swallow Ctrl-C"
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("argv", [["hotkeyd", "run"], ["x/__main__.py", "run", "--no-http"]])
def test_the_latch_is_installed_for_run(argv: list[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    install_early(argv)
    latch = take_early()
    assert latch is not None
    try:
        assert signal.getsignal(signal.SIGINT) is not before
    finally:
        latch.__exit__(None, None, None)
    assert signal.getsignal(signal.SIGINT) is before
