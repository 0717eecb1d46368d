"""The shipped JSON Schemas describe what wire.py really emits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from hotkeyd.clock import ManualClock
from hotkeyd.protocol import contract
from hotkeyd.protocol.wire import CoolEntry, HotEntry, Message
from hotkeyd.publish import MemoryPublisher

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "spec" / "schema"
HAVE_JSONSCHEMA = importlib.util.find_spec("jsonschema") is not None


def load(name: str) -> dict[str, Any]:
    return contract.schema(name)


def test_the_package_reads_the_one_source_in_spec() -> None:
    names = sorted(p.name for p in SCHEMA_DIR.glob("*.json"))
    assert {"notification-v1.json", "snapshot-v1.json", "invalidation-v1.json"} <= set(names)
    for name in names:
        assert contract.schema(name) == json.loads((SCHEMA_DIR / name).read_text())
    with pytest.raises(contract.ContractError):
        contract.schema("../pyproject.toml")


def real_messages() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Messages and a snapshot produced by the real publisher code path."""
    pub = MemoryPublisher("host-1-ab12", ManualClock(), full_on_start=True)
    pub.start()
    pub.publish(
        [
            HotEntry(
                b"\xff\xfebinary", 12.5, "r1", 5000, since=1_700_000_000.5, db=2, kind="write"
            ),
            HotEntry(b"plain:1", 3.0, "default", 1000),
        ],
        [],
        [],
    )
    pub.publish(
        [], [HotEntry(b"plain:1", 4.0, "default", 1000)], [CoolEntry(b"\x00\x01", "r1", db=1)]
    )
    pub.update_state(
        pub.hot_set(),
        [{"key": b"\xff\xfebinary", "rate": 12.5, "rule": "r1", "hot": True, "db": 2}],
    )
    pub.publish([], [], [CoolEntry(b"plain:1")], final=True)
    return [m.to_json() for m in pub.messages], pub.snapshot().to_json()


def test_schemas_are_valid_draft_2020_12() -> None:
    for name in sorted(p.name for p in SCHEMA_DIR.glob("*.json")):
        schema = load(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        if HAVE_JSONSCHEMA:
            import jsonschema

            jsonschema.Draft202012Validator.check_schema(schema)


def _check_structure(schema: dict[str, Any], obj: dict[str, Any]) -> None:
    """Without jsonschema: required fields present, every emitted field declared."""
    props = schema["properties"]
    assert set(schema["required"]) <= obj.keys()
    assert obj.keys() <= props.keys(), obj.keys() - props.keys()
    assert obj["v"] == props["v"]["const"]
    defs = schema["$defs"]
    for field, kind in (("hot", "hotEntry"), ("cool", "coolEntry"), ("top", "topEntry")):
        if kind not in defs:
            continue
        for entry in obj.get(field, []):
            assert set(defs[kind]["required"]) <= entry.keys(), (field, entry)
            assert entry.keys() <= defs[kind]["properties"].keys(), (field, entry)
            if "enc" in entry:
                assert entry["enc"] in defs["enc"]["enum"]


def test_real_messages_match_notification_schema_structurally() -> None:
    msgs, snap = real_messages()
    schema = load("notification-v1.json")
    assert len(msgs) == 4
    for m in msgs:
        _check_structure(schema, m)
    _check_structure(load("snapshot-v1.json"), snap)
    assert any(e.get("enc") == "base64" for m in msgs for e in m["hot"] + m["cool"])
    assert snap["top"][0]["enc"] == "base64"


@pytest.mark.skipif(
    not HAVE_JSONSCHEMA, reason="jsonschema not installed (structural test still runs)"
)
def test_real_messages_validate_with_jsonschema() -> None:
    import jsonschema

    msgs, snap = real_messages()
    notif = jsonschema.Draft202012Validator(load("notification-v1.json"))
    snapv = jsonschema.Draft202012Validator(load("snapshot-v1.json"))
    for m in msgs:
        notif.validate(m)
        # what goes on the channel is exactly this JSON
        notif.validate(json.loads(Message.loads(json.dumps(m)).dumps()))
    snapv.validate(snap)
    # the schemas reject what a client must not accept
    bad = [
        {**msgs[1], "v": 2},
        {k: v for k, v in msgs[1].items() if k != "seq"},
        {**msgs[1], "seq": 0},
        {**msgs[1], "hot": [{"key": "a", "rate": 1.0, "rule": "r"}]},  # no ttl_ms
        {
            **msgs[1],
            "hot": [{"key": "not base64!", "enc": "base64", "rate": 1.0, "rule": "r", "ttl_ms": 1}],
        },
        {**msgs[1], "cool": [{"key": "a", "enc": "rot13"}]},
    ]
    for obj in bad:
        assert not notif.is_valid(obj), obj
    assert not snapv.is_valid({**snap, "full": False})
    assert not snapv.is_valid({**snap, "cool": [{"key": "a"}]})
