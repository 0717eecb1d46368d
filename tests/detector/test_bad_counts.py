"""A batch with a count that is not a number is counted as malformed, never fatal."""

from __future__ import annotations

import pytest

from hotkeyd.batch import Batch
from hotkeyd.clock import ManualClock
from hotkeyd.detector import Detector, DetectorConfig
from hotkeyd.detector.rules import RuleSet


@pytest.mark.parametrize("bad", [None, "x", 1.5j, -3])
def test_one_bad_count_spoils_only_its_key(bad: object) -> None:
    det = Detector(DetectorConfig(), RuleSet.default(), ManualClock())
    res = det.ingest(Batch(keys=[b"a", b"b", b"c"], counts=[2, bad, 3]))
    assert res.malformed == 1
    assert res.events == 5


def test_late_and_on_time_counted_lines_share_one_grammar() -> None:
    """Late batches used Python int(), which reads '+5', ' 5' and '5_0' (= 50)."""
    lines = b"a\t+5\nb\t 5\nc\t5_0\nd\t-1\ne\t\nf\t4294967296\ng\t007\nh\t4294967295\n"
    clock = ManualClock()
    det = Detector(DetectorConfig(), RuleSet.default(), clock)
    on_time = det.ingest(Batch(lines=lines, counted=True, ts=clock.time()))
    late = det.ingest(Batch(lines=lines, counted=True, ts=clock.time() - 5))  # > 1 window old
    assert on_time.malformed == 6 and on_time.events == 7 + 4294967295
    assert late.malformed == on_time.malformed
    assert late.late == on_time.events
