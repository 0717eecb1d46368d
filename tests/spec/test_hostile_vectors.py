"""spec/vectors/hostile.json against every Python decoder that reads the contract's JSON.

One verdict per document in every language (Go, Node and Java run the same file): huge
or non-finite numbers, invalid UTF-8 and deep nesting reject the document as data, and
nothing else escapes the decoder.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hotkeyd.client.invalidation import decode_invalidation
from hotkeyd.protocol import strictjson
from hotkeyd.protocol.demand import DemandReport
from hotkeyd.protocol.wire import MAX_SEQ, Message, WireError

DOC = json.loads((Path(__file__).resolve().parents[2] / "spec/vectors/hostile.json").read_text())
DECODERS: dict[str, Callable[[bytes], Any]] = {
    "notification": Message.loads,
    "demand": DemandReport.loads,
    "invalidation": decode_invalidation,
}


def payload(case: dict[str, Any]) -> bytes:
    if "input_base64" in case:
        return base64.b64decode(case["input_base64"])
    if "gen" in case:
        g = case["gen"]
        return (
            g["prefix"] + g["open"] * g["times"] + g["close"] * g["times"] + g["suffix"]
        ).encode()
    return case["input"].encode("utf-8")


def test_limits_match_the_code() -> None:
    assert DOC["max_depth"] == strictjson.MAX_DEPTH
    assert DOC["max_seq"] == MAX_SEQ


@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["name"])
def test_hostile_vector(case: dict[str, Any]) -> None:
    decode = DECODERS[case["decoder"]]
    data = payload(case)
    if case["valid"]:
        decode(data)
    else:
        with pytest.raises(WireError):  # DemandError is a WireError
            decode(data)
