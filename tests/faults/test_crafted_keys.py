"""Issue 23's row "keys crafted against the sketch's hash": a real ``hotkeyd run`` on stdin
gets keys crafted offline for the hash it used before (seed 0, public masks;
tests/sketch/crafted.py). On main, the 500 junk keys shared one bucket (each read as
2,500/s: announced hot) and an honest key read 20/s shared its twin's count (announced at
3,020/s). With a per-process secret seed, crafted keys cost as much as honest traffic."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from hotkeyd.protocol.wire import decode_key
from hotkeyd.testing import DaemonProcess
from tests.sketch.crafted import honest_key_with_twin, junk_keys

pytestmark = pytest.mark.integration

RULES = "[default]\nthreshold = 1000\nttl = 2.0\ncooldown = 1.0\n"


def _announced(d: DaemonProcess) -> tuple[set[bytes], threading.Thread]:
    """Every key the daemon announces hot on stdout, read in a thread."""
    hot: set[bytes] = set()

    def read() -> None:
        assert d.proc is not None and d.proc.stdout is not None
        for line in d.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            for entry in msg.get("hot") or ():
                hot.add(decode_key(entry))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return hot, t


def test_crafted_keys_cost_as_much_as_honest_ones(tmp_path: object) -> None:
    rng = random.Random(23)
    junk = junk_keys(500, rng)
    key, twin = honest_key_with_twin(rng)
    rules = tmp_path / "rules.toml"  # type: ignore[operator]
    rules.write_text(RULES)
    with DaemonProcess("--window", "1.0", "--rules", str(rules), log_level="warning") as d:
        hot, reader = _announced(d)
        before, t0 = d.metric("hotkeyd_source_events_total"), time.monotonic()
        d.feed_rate(dict.fromkeys(junk, 5.0), seconds=4.0)  # 2,500 events/s in all
        rate = (d.metric("hotkeyd_source_events_total") - before) / (time.monotonic() - t0)
        d.feed_rate({key: 20.0, twin: 3000.0}, seconds=4.0)
        time.sleep(0.5)
        assert twin in hot, "the twin (3,000/s) was never announced: the check proves nothing"
        announced_junk = hot & set(junk)
        assert 2000 <= rate <= 2700, rate
        assert not announced_junk, f"{len(announced_junk)} of 500 junk keys announced hot"
        assert key not in hot, "the honest key (20/s) was announced with its twin's count"
        assert d.stop() == 0
    reader.join(5)
