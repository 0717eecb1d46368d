"""Shutdown promises: one final tick on SIGTERM, and no exit 0 with notifications queued."""

from __future__ import annotations

import json
import signal
import time

from hotkeyd.batch import Batch
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.service import Service
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.publish.memory import MemoryPublisher
from hotkeyd.testing import DaemonProcess


class _OneBurstThenStop:
    """Hands over one burst, then asks the service to stop (as SIGTERM does)."""

    name = "burst"
    exhausted = False
    error = None
    connected = True
    unhealthy = None
    reports_idle = False

    def idle_watermark(self) -> None:
        return None

    def __init__(self, service_box: list[Service]) -> None:
        self.box = service_box
        self.calls = 0

    def start(self) -> None:
        pass

    def next_batch(self, max_wait: float) -> list[Batch]:
        self.calls += 1
        if self.calls == 1:
            return [Batch(keys=[b"burst"], counts=[50_000])]
        self.box[0].request_stop()
        return []

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_stop_evaluates_one_final_tick_before_the_final_message() -> None:
    """The burst sits in the open sub-window when the stop comes: only a tick rates it."""
    box: list[Service] = []
    pub = MemoryPublisher(instance="t")
    rules = RuleSet(default=Rule("default", threshold=1000.0, ttl=5.0, cooldown=1.0))
    svc = Service(
        Settings(http_port=None, window=1.0, tick=0.5),
        sources=[_OneBurstThenStop(box)],
        publisher=pub,
        rules=rules,
    )
    box.append(svc)
    assert svc.run() == 0
    final = pub.messages[-1]
    assert final.final
    assert [h.key for h in final.hot] == [b"burst"]


def test_sigterm_to_the_daemon_process_publishes_the_last_sub_window() -> None:
    d = DaemonProcess(
        "--no-http", "--window", "2", "--tick", "1",
        env={"HOTKEYD_LOG_LEVEL": "WARNING"}, http=False, log_level=None,
    ).start()  # fmt: skip
    time.sleep(1.5)  # started; ticks at 1 s steps
    d.feed(b"late:key\n" * 20_000)
    time.sleep(0.2)  # read, but its sub-window is still open
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0  # stdin still open: no end of input races the signal
    assert d.proc is not None and d.proc.stdout is not None
    out = d.proc.stdout.read()
    d.close()
    msgs = [json.loads(line) for line in out.splitlines()]
    assert msgs[-1]["final"] is True
    assert [h["key"] for h in msgs[-1]["hot"]] == ["late:key"]
