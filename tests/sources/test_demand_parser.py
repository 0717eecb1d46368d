"""The batched demand report parser: the C core and its twin give the same verdicts as
``DemandReport.loads`` on the spec's vectors, and the intake's merge and cap."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType

import pytest

from hotkeyd.protocol.demand import DemandEntry, DemandError, DemandReport
from hotkeyd.sources import _demand_py
from tests.fuzz.checks import check_demand, demand_limits
from tests.spec.test_hostile_vectors import payload

SPEC = Path(__file__).resolve().parents[2] / "spec" / "vectors"
LIM = demand_limits()


def _c() -> ModuleType:
    from hotkeyd.sources import _demand

    return _demand


@pytest.fixture(params=["native", "python"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return _c() if request.param == "native" else _demand_py


def documents() -> list[tuple[str, bytes]]:
    """Every demand document of spec/vectors (hostile.json, limits.json) and more."""
    out = []
    for case in json.loads((SPEC / "hostile.json").read_text())["cases"]:
        out.append((f"hostile: {case['name']}", payload(case)))
    for case in json.loads((SPEC / "limits.json").read_text())["demand"]:
        doc = json.dumps(case["data"]).encode()
        if "pad_to" in case:
            doc = doc[:-1] + b" " * (case["pad_to"] - len(doc)) + b"}"
        out.append((f"limits: {case['name']}", doc))
    for ts in ("1e400", "-1e400", "NaN", "Infinity", "-9223372036854775809", "1.5e-400"):
        out.append(
            (
                f"ts {ts}",
                b'{"v":1,"type":"demand","app":"a","seq":1,"ts":%s,'
                b'"interval_ms":250,"entries":[]}' % ts.encode(),
            )
        )
    for key in ("", "=", "QQ==", "QUI=", "QUJD", "QUJD=", "QUJDRA==", "QQ=", "Q", "QUI==", "-_"):
        out.append(
            (
                f"base64 {key!r}",
                b'{"v":1,"type":"demand","app":"a","seq":1,"ts":1,'
                b'"interval_ms":250,"entries":[{"key":"%s","enc":"base64","n":1}]}' % key.encode(),
            )
        )
    return out


DOCS = documents()


@pytest.mark.parametrize("name,doc", DOCS, ids=[n for n, _ in DOCS])
def test_the_verdict_is_the_python_decoders(impl: ModuleType, name: str, doc: bytes) -> None:
    (got,) = impl.parse([doc], LIM)
    try:
        report = DemandReport.loads(doc)
    except DemandError as exc:
        assert len(got) == 2 and got[0] == exc.reason, (got, exc)
        return
    assert got[:5] == (report.app, report.seq, report.ts, report.interval_ms, report.total)


def test_repeated_keys_merge_before_the_cap_and_group_by_db(impl: ModuleType) -> None:
    doc = DemandReport(
        "app-\ud800",  # a lone surrogate from a \\u escape survives, as in Python
        7,
        1764480000.25,
        250,
        (
            DemandEntry(b"a", 100),
            DemandEntry(b"b", 3, 2),
            DemandEntry(b"a", 200),
            DemandEntry(b"\xff", 1, 2),
            DemandEntry(b"c", 9),
        ),
    ).to_json()
    data = json.dumps(doc).encode()  # ensure_ascii: the surrogate as \\ud800
    (got,) = impl.parse([data], LIM)  # cap: 1000/s * 0.25 s = 250
    assert got == (
        "app-\ud800",
        7,
        1764480000.25,
        250,
        313,
        [(0, [b"a", b"c"], [250, 9]), (2, [b"b", b"\xff"], [3, 1])],
        1,
    )


def test_reports_of_one_batch_do_not_share_state(impl: ModuleType) -> None:
    rng = random.Random(3)
    docs = [
        DemandReport(
            f"a{i}",
            i,
            1.0,
            250,
            tuple(
                DemandEntry(
                    bytes(rng.choices(b"xyz", k=rng.randint(0, 4))),
                    rng.randint(1, 99),
                    rng.choice((0, 0, 1)),
                )
                for _ in range(rng.randint(0, 30))
            ),
        ).dumps()
        for i in range(50)
    ]
    docs[10] = b"{"  # a bad one in the middle
    batch = impl.parse(docs, LIM)
    assert batch == [impl.parse([d], LIM)[0] for d in docs]
    assert batch[10][0] == "malformed"


def test_c_and_twin_agree_on_mutated_reports() -> None:
    extra = DemandReport("x", 1, 2.5, 300, (DemandEntry(b"k", 5), DemandEntry(b"/", 1, 3)))
    base = [d for _, d in DOCS if b'"entries":[{' in d][:5]
    base.append(extra.dumps())
    rng = random.Random(11)
    alphabet = b'{}[]",:0123456789.eE-+tfnul\\ abdekmnprsvy=/'
    for _ in range(3000):
        doc = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(doc) + 1)
            if rng.random() < 0.4:
                del doc[at : at + rng.randint(1, 3)]
            else:
                doc[at:at] = bytes(
                    [rng.choice(alphabet) if rng.random() < 0.8 else rng.randrange(256)]
                )
        check_demand(bytes([rng.randrange(256), rng.randrange(256)]) + bytes(doc))


def test_wrong_types_raise_type_error_and_bad_limits_value_error(impl: ModuleType) -> None:
    with pytest.raises(TypeError):
        impl.parse(["not bytes"], LIM)
    if impl is _demand_py:
        return
    with pytest.raises(TypeError):
        impl.parse([b"{}"], LIM[:5])
    with pytest.raises(ValueError):
        impl.parse([b"{}"], (-1, *LIM[1:]))
