"""Internal (db, key) identities and odd batch shapes."""

from __future__ import annotations

import numpy as np
import pytest

from hotkeyd.batch import Batch
from hotkeyd.detector.keys import decode_ident, encode_ident, encode_keys, encode_lines
from hotkeyd.detector.rules import parse_rules
from hotkeyd.errors import RulesError

from .conftest import MakeSim


@pytest.mark.parametrize("key", [b"", b"a", b"\x00hkdb", b"\x00\xff\n\t x", b"k" * 1000])
@pytest.mark.parametrize("db", [0, 1, 15, 4096])
def test_ident_roundtrip(key: bytes, db: int) -> None:
    ident = encode_ident(key, db)
    assert decode_ident(ident) == (db, key)
    assert (ident == key) is (db == 0)  # db 0 keys go to the sketch unchanged


def test_encode_batches() -> None:
    keys = [b"a", b"b"]
    assert encode_keys(keys, 0) is keys
    assert [decode_ident(i) for i in encode_keys(keys, 2)] == [(2, b"a"), (2, b"b")]
    lines = encode_lines(b"a\r\n\nb c\n", 7)
    assert [decode_ident(x.rstrip(b"\r")) for x in bytes(lines).split(b"\n")] == [
        (7, b"a"),
        (7, b"b c"),
    ]
    assert encode_lines(b"a\n", 0) == b"a\n"


def test_numpy_counts_and_bad_counts(make_sim: MakeSim) -> None:
    sim = make_sim(parse_rules("[default]\nthreshold = 10\n"))
    res = sim.det.ingest(Batch(keys=[b"a", b"b"], counts=np.array([3, 4]), source="np"))
    assert res.events == 7
    # A negative count is rejected by the sketch: the rest of the batch still counts.
    res = sim.det.ingest(Batch(keys=[b"a", b"c", b"d"], counts=[2, -1, 5], source="np"))
    assert (res.events, res.malformed) == (7, 1)
    res = sim.det.ingest(Batch(keys=[b"a", b"b"], counts=[1], source="np"))  # length mismatch
    assert (res.events, res.malformed) == (0, 2)
    sim.step()
    rates = {e.key: e.rate for e in sim.det.top()}
    assert rates == {b"a": 5.0, b"b": 4.0, b"d": 5.0}


def test_bad_rules_file_leaves_old_rules_in_force(make_sim: MakeSim) -> None:
    old = parse_rules('[[rule]]\nname = "a"\nprefix = "a"\nthreshold = 5\n')
    sim = make_sim(old)
    with pytest.raises(RulesError):
        sim.det.set_rules(parse_rules('[[rule]]\nname = "a"\nprefix = "a"\nthreshold = 0\n'))
    assert sim.det.rules is old
    sim.run({b"a1": 10.0}, 1.0)
    assert [e.rule for e in sim.det.hot()] == ["a"]


@pytest.mark.parametrize("db", [-1, "3", True])
def test_bad_db_is_counted_not_rated(make_sim: MakeSim, db: object) -> None:
    sim = make_sim(parse_rules("[default]\nthreshold = 10\n"))
    res = sim.det.ingest(Batch(lines=b"a\nb\r\n\nc\n", db=db, source="x"))  # type: ignore[arg-type]
    assert (res.events, res.malformed) == (0, 3)
    res = sim.det.ingest(Batch(keys=[b"a", b"b"], db=db, source="x"))  # type: ignore[arg-type]
    assert (res.events, res.malformed) == (0, 2)
    sim.step()
    assert sim.det.top() == []
