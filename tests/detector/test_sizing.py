"""The detector sizes its sub-window sketches for the key lengths it sees."""

from __future__ import annotations

import logging

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig
from hotkeyd.detector.rules import parse_rules
from hotkeyd.detector.sizing import KeySizer
from hotkeyd.ratelog import RateLimitedLog
from hotkeyd.sketch import HeavyKeeper


def _sizer(k: int = 100, memory: int = 65536, max_key_len: int = 1024) -> KeySizer[HeavyKeeper]:
    def make(key_bytes: int | None = None) -> HeavyKeeper:
        return HeavyKeeper(k=k, memory=memory, max_key_len=max_key_len, key_bytes=key_bytes)

    log = RateLimitedLog(logging.getLogger("hotkeyd.test.sizing"), 10.0, lambda: 0.0)
    return KeySizer(make, k, memory, max_key_len, log)


def _filled(sk: HeavyKeeper, length: int, n: int = 300) -> HeavyKeeper:
    for i in range(n):
        sk.update(b"%0*d" % (length, i), 1 + i % 50)
    return sk


def test_long_keys_get_a_bigger_store() -> None:
    sizer = _sizer()
    sk = _filled(HeavyKeeper(k=100, memory=65536, key_bytes=2000), 100)
    assert sk.space_evictions > 0 and len(sk) < 100
    fresh = sizer.renew(sk, None)
    assert fresh is not None and fresh.key_bytes >= 100 * 100
    assert fresh.nbytes <= 65536
    assert len(_filled(fresh, 100)) == 100
    assert sizer.renew(_filled(fresh, 100), None) is None  # settled


def test_short_keys_give_bytes_back_to_buckets() -> None:
    sizer = _sizer()
    sk = _filled(HeavyKeeper(k=100, memory=65536), 12)  # default store: 16 KiB
    fresh = sizer.renew(sk, None)
    assert fresh is not None
    assert fresh.key_bytes == 100 * 16  # floor: 16 bytes per key
    assert fresh.width > sk.width


def test_budget_too_small_says_so(caplog: pytest.LogCaptureFixture) -> None:
    sizer = _sizer(memory=32768)
    sk = _filled(HeavyKeeper(k=100, memory=32768), 300)
    with caplog.at_level(logging.WARNING, logger="hotkeyd.test.sizing"):
        fresh = sizer.renew(sk, None)
    assert fresh is not None and fresh.key_bytes == 32768 // 2  # capped at half
    assert "cannot hold k=100 keys of ~300 bytes" in caplog.text


def test_unsized_sketch_is_reused() -> None:
    assert _sizer().renew(object(), [b"a"]) is None  # type: ignore[arg-type]
    assert _sizer().renew(HeavyKeeper(k=100), []) is None


def test_detector_grows_the_store_for_long_keys() -> None:
    """200 keys of 150 bytes do not fit the default store (k=200, ~95 KiB per sketch)."""
    config = DetectorConfig(k=200, max_key_len=1024)
    clock = ManualClock()
    det = Detector(config, parse_rules("[default]\nthreshold = 1000000\n"), clock)
    keys = [b"session:%0142d" % i for i in range(400)]  # 150 bytes each
    lines = b"".join(k + b"\n" for i, k in enumerate(keys) for _ in range(1 + (i < 200) * 4))
    for _ in range(3 * (config.subwindows + 1)):
        det.ingest(Batch(lines=lines, source="t"))
        clock.advance(config.tick)
        det.tick()
    ring = det._lanes[""].ring  # the processing-time lane (batches without ts)
    sketches = [slot.sketch for slot in ring._slots]
    assert all(sk.key_bytes >= 200 * 150 for sk in sketches)
    assert all(sk.nbytes <= config.memory // (config.subwindows + 1) for sk in sketches)
    assert det.nbytes <= config.memory
    closed = ring.slot(ring.cur - 1).sketch
    assert len(closed) == 200 and closed.space_evictions == 0
    assert {k for k, _ in closed.topk()} == set(keys[:200])
