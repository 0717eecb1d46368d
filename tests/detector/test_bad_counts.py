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
