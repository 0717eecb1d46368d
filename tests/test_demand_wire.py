"""Demand reports (hotkeyd.protocol.demand): round trip, validation reasons, and the shipped schema."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

import hotkeyd
from hotkeyd.protocol import contract
from hotkeyd.protocol.demand import (
    MAX_ENTRIES,
    MAX_N,
    DemandEntry,
    DemandError,
    DemandReport,
)
from hotkeyd.protocol.wire import Namespace

SCHEMA = contract.schema("demand-v1.json")
HAVE_JSONSCHEMA = importlib.util.find_spec("jsonschema") is not None


def sample() -> DemandReport:
    return DemandReport(
        "web-1-ab12",
        7,
        1_764_480_000.25,
        250,
        (DemandEntry(b"product:1", 612), DemandEntry(b"\xff\x00bin", 3, db=2)),
    )


def test_round_trip_and_layout() -> None:
    rep = sample()
    obj = json.loads(rep.dumps())
    assert obj == {
        "v": 1,
        "type": "demand",
        "app": "web-1-ab12",
        "seq": 7,
        "ts": 1764480000.25,
        "interval_ms": 250,
        "entries": [
            {"key": "product:1", "n": 612},
            {"key": "/wBiaW4=", "enc": "base64", "db": 2, "n": 3},
        ],
    }
    assert DemandReport.loads(rep.dumps()) == rep
    assert rep.total == 615
    assert Namespace("p").demand_channel("d-1") == "p:demand:d-1"


def test_unknown_fields_are_ignored() -> None:
    obj = json.loads(sample().dumps())
    obj["future"] = {"x": 1}
    obj["entries"][0]["extra"] = True
    assert DemandReport.loads(json.dumps(obj)) == sample()


def _bad(mutate: Any) -> dict[str, Any]:
    obj = json.loads(sample().dumps())
    mutate(obj)
    return obj


BAD = [
    ("malformed", b"not json"),
    ("malformed", b"[1, 2]"),
    ("version", _bad(lambda o: o.update(v=2))),
    ("malformed", _bad(lambda o: o.update(type="events"))),
    ("malformed", _bad(lambda o: o.pop("app"))),
    ("malformed", _bad(lambda o: o.update(app=""))),
    ("malformed", _bad(lambda o: o.update(seq=-1))),
    ("malformed", _bad(lambda o: o.update(seq=True))),
    ("malformed", _bad(lambda o: o.update(ts="now"))),
    ("malformed", _bad(lambda o: o.update(interval_ms=0))),
    ("malformed", _bad(lambda o: o.update(entries={}))),
    ("bad_entry", _bad(lambda o: o["entries"].append([1]))),
    ("bad_entry", _bad(lambda o: o["entries"][0].update(n=0))),
    ("bad_entry", _bad(lambda o: o["entries"][0].update(n=MAX_N + 1))),
    ("bad_entry", _bad(lambda o: o["entries"][0].update(n=1.5))),
    ("bad_entry", _bad(lambda o: o["entries"][0].update(db=-1))),
    ("bad_entry", _bad(lambda o: o["entries"][0].pop("key"))),
    ("bad_entry", _bad(lambda o: o["entries"][1].update(key="not base64!"))),
    ("bad_entry", _bad(lambda o: o["entries"][1].update(enc="rot13"))),
    (
        "too_many_entries",
        _bad(
            lambda o: o.update(entries=[{"key": f"k{i}", "n": 1} for i in range(MAX_ENTRIES + 1)])
        ),
    ),
]


@pytest.mark.parametrize(("reason", "data"), BAD)
def test_bad_reports_are_rejected_with_a_reason(reason: str, data: Any) -> None:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    with pytest.raises(DemandError) as info:
        DemandReport.loads(raw)
    assert info.value.reason == reason
    assert isinstance(info.value, hotkeyd.HotkeydError)


def test_oversized_is_rejected_before_parsing() -> None:
    with pytest.raises(DemandError) as info:
        DemandReport.loads(b"{" * 100, max_bytes=99)
    assert info.value.reason == "oversized"
    with pytest.raises(DemandError) as info:
        DemandReport.loads(b"[" * 100_000)  # deep nesting: malformed, not a RecursionError
    assert info.value.reason == "malformed"


def test_schema_is_valid_and_in_the_notification_style() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(SCHEMA["required"]) == set(json.loads(sample().dumps()))
    entry = SCHEMA["$defs"]["demandEntry"]
    assert entry["properties"]["n"]["maximum"] == MAX_N
    assert SCHEMA["properties"]["entries"]["maxItems"] == MAX_ENTRIES
    if HAVE_JSONSCHEMA:
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.skipif(not HAVE_JSONSCHEMA, reason="jsonschema not installed")
def test_schema_accepts_what_we_send_and_rejects_what_we_reject() -> None:
    import jsonschema

    v = jsonschema.Draft202012Validator(SCHEMA)
    v.validate(json.loads(sample().dumps()))
    for reason, data in BAD:
        if isinstance(data, bytes) or reason == "version":
            continue
        if reason == "bad_entry" and data["entries"][-1] == [1]:  # type: ignore[index]
            assert not v.is_valid(data)
            continue
        assert not v.is_valid(data), (reason, data)
