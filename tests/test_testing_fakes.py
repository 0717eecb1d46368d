"""hotkeyd.testing's in-memory fakes behave like the real parts they stand in for."""

from __future__ import annotations

from hotkeyd.batch import Batch
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.service import Service
from hotkeyd.detector.rules import Rule, RuleSet
from hotkeyd.publish.memory import MemoryPublisher
from hotkeyd.sketch import HeavyKeeper, SketchLike
from hotkeyd.testing import ExactSketch, ListSource


def test_list_source_drives_the_real_service_to_the_end() -> None:
    src = ListSource([Batch(keys=[b"hot"], counts=[20_000]), Batch(lines=b"a\nb\n")])
    pub = MemoryPublisher(instance="t")
    rules = RuleSet(default=Rule("default", threshold=1000.0, ttl=5.0, cooldown=1.0))
    svc = Service(Settings(http_port=None), sources=[src], publisher=pub, rules=rules)
    assert svc.run() == 0
    assert src.started and src.closed and src.exhausted
    assert src.handed == 2 and src.committed == 2
    assert [h.key for h in pub.messages[-1].hot] == [b"hot"]


def test_exact_sketch_matches_the_real_sketch_where_both_are_exact() -> None:
    exact: SketchLike = ExactSketch(k=10)
    real: SketchLike = HeavyKeeper(k=10, memory=1 << 16)
    lines = b"b\t3\na\t3\nc\n+1\t+1\nd\t5_0\n\n"
    assert exact.update_lines(lines, counted=True) == real.update_lines(lines, counted=True)
    for sk in (exact, real):
        sk.update("é")
        sk.update_many([b"z", "z"], [2, 2])
    assert exact.topk() == real.topk()  # count descending, then key ascending
    assert exact.estimate("z") == real.estimate(b"z") == 4
    exact.clear()
    assert exact.topk() == [] and len(exact) == 0
