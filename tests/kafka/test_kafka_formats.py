"""Record formats: encoding (reporter messages) and decoding (records -> Batches + rejects)."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_testutil import count_batches

from hotkeyd.protocol.formats import (
    MAX_COUNT,
    RecordDecoder,
    encode_counts,
    encode_json_batch,
    encode_json_record,
    lines_safe,
)


@dataclass
class Rec:
    """A record as a consumer hands it over (only the fields the decoder reads)."""

    key: bytes | None
    value: bytes | None
    timestamp: int = 1_700_000_000_000
    offset: int = 0


def decode(fmt: str, recs: list[Rec], **kw: object) -> tuple[collections.Counter[bytes], list[str]]:
    batches, bad = RecordDecoder(fmt, **kw).decode(recs)  # type: ignore[arg-type]
    return count_batches(batches), [reason for reason, _ in bad]


def test_key_format_uses_record_key() -> None:
    recs = [Rec(b"hot", b"ignored")] * 5 + [
        Rec(b"cold", None),
        Rec(None, b"x"),
        Rec(b"k" * 2000, b""),
    ]
    counts, bad = decode("key", recs)
    assert counts == {b"hot": 5, b"cold": 1}
    assert sorted(bad) == ["no_key", "oversized"]


def test_raw_format_uses_value_and_max_key_len() -> None:
    counts, bad = decode(
        "raw", [Rec(None, b"a"), Rec(None, b"bb"), Rec(None, b"ccc"), Rec(None, b"")], max_key_len=2
    )
    assert counts == {b"a": 1, b"bb": 1}
    assert sorted(bad) == ["empty", "oversized"]


def test_lines_plain_and_counted_go_to_fast_path_batches() -> None:
    recs = [Rec(None, b"a\nb\na"), Rec(None, b"hot\t7\nb\t2\n"), Rec(None, b"c\r\n")]
    batches, bad = RecordDecoder("lines").decode(recs)
    assert not bad
    assert all(b.lines is not None for b in batches)
    assert sorted(b.counted for b in batches) == [False, True]  # one plain, one counted batch
    assert count_batches(batches) == {b"a": 2, b"b": 3, b"hot": 7, b"c": 1}


def test_lines_values_are_concatenated_into_one_batch_per_bucket() -> None:
    recs = [Rec(None, b"k%d" % i, timestamp=1_700_000_000_000 + i) for i in range(50)]
    batches, _ = RecordDecoder("lines").decode(recs)
    assert len(batches) == 1
    assert batches[0].ts == pytest.approx(1_700_000_000.049)
    assert count_batches(batches) == {b"k%d" % i: 1 for i in range(50)}


def test_batches_follow_100ms_timestamp_buckets() -> None:
    t0 = 1_700_000_000_000
    recs = [
        Rec(b"a", None, t0),
        Rec(b"a", None, t0 + 50),
        Rec(b"b", None, t0 + 250),
        Rec(b"a", None, t0 + 20),
    ]
    batches, _ = RecordDecoder("key").decode(recs)
    assert [b.ts for b in batches] == [
        pytest.approx((t0 + 50) / 1000),
        pytest.approx((t0 + 250) / 1000),
    ]
    assert [count_batches([b]) for b in batches] == [{b"a": 3}, {b"b": 1}]


def test_missing_timestamp_means_now() -> None:
    batches, _ = RecordDecoder("key").decode([Rec(b"a", None, timestamp=-1)])
    assert batches[0].ts is None


def test_json_single_and_batch_objects() -> None:
    recs = [
        Rec(None, b'{"key": "hot", "count": 3}'),
        Rec(None, b'{"key": "hot"}'),
        Rec(None, encode_json_record(b"\xff\x00bin", 2)),
        Rec(None, encode_json_batch([(b"hot", 10), (b"\xfe", 4), (b"tab\tkey", 1)])),
    ]
    counts, bad = decode("json", recs)
    assert not bad
    assert counts == {b"hot": 14, b"\xff\x00bin": 2, b"\xfe": 4, b"tab\tkey": 1}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "undecodable"),
        (b"\xff\xfe", "undecodable"),
        (b"[1, 2]", "wrong_format"),
        (b'{"count": 1}', "wrong_format"),
        (b'{"key": 5}', "wrong_format"),
        (b'{"key": "a", "count": 0}', "bad_count"),
        (b'{"key": "a", "count": "7"}', "bad_count"),
        (b'{"key": "a", "count": 1.5}', "bad_count"),
        (b'{"key": "a", "count": %d}' % (MAX_COUNT + 1), "bad_count"),
        (b'{"key": "a", "enc": "rot13"}', "wrong_format"),
        (b'{"key": "!!", "enc": "base64"}', "undecodable"),
        (b'{"key": ""}', "empty"),
        (b'{"v": 2, "keys": []}', "wrong_format"),
        (b'{"v": 1, "keys": [["a", 1, "hex"]]}', "wrong_format"),
        (b"", "empty"),
    ],
)
def test_json_bad_records_have_a_reason(value: bytes, reason: str) -> None:
    counts, bad = decode("json", [Rec(None, value)])
    assert bad == [reason]
    assert not counts


def test_json_batch_keeps_good_entries_of_a_partly_bad_record() -> None:
    value = json.dumps({"v": 1, "keys": [["ok", 2], ["bad", -1], ["x" * 30, 1]]}).encode()
    counts, bad = decode("json", [Rec(None, value)], max_key_len=20)
    assert counts == {b"ok": 2}
    assert bad == ["bad_count"]  # one reject per record, first reason


def test_reporter_format_dispatches_on_first_byte() -> None:
    recs = [
        Rec(None, b"a\t2\nb\t1\n"),
        Rec(None, encode_json_batch([(b"{brace", 5)])),
        Rec(None, b"plain\n"),
    ]
    counts, bad = decode("reporter", recs)
    assert not bad
    assert counts == {b"a": 2, b"b": 1, b"{brace": 5, b"plain": 1}


def test_lines_safe() -> None:
    assert lines_safe(b"user:1")
    assert lines_safe(b"\xff\x00")
    for k in (b"", b"a\tb", b"a\nb", b"a\rb", b"{x"):
        assert not lines_safe(k)


def test_encode_counts_splits_large_batches() -> None:
    items = [(b"key:%06d" % i, i + 1) for i in range(5000)]
    msgs = encode_counts(items, max_bytes=4096)
    assert len(msgs) > 10
    assert all(len(m) <= 4096 for m in msgs)
    counts, bad = decode("reporter", [Rec(None, m) for m in msgs])
    assert not bad
    assert counts == dict(items)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.binary(min_size=1, max_size=40), st.integers(1, MAX_COUNT), max_size=60))
def test_reporter_messages_round_trip_any_keys(items: dict[bytes, int]) -> None:
    msgs = encode_counts(list(items.items()), max_bytes=512)
    counts, bad = decode("reporter", [Rec(None, m) for m in msgs])
    assert not bad
    assert counts == items


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown record format"):
        RecordDecoder("xml")


def test_one_base64_marker_is_written() -> None:
    """The schemas' word ("enc": "base64") in single records and in batch entries alike."""
    batch = json.loads(encode_json_batch([(b"\xfe", 4)]))
    assert batch["keys"] == [["/g==", 4, "base64"]]
    assert json.loads(encode_json_record(b"\xfe"))["enc"] == "base64"


@pytest.mark.parametrize("marker", ["base64", "b64"])
def test_both_base64_markers_are_read(marker: str) -> None:
    """Topics already hold batch entries written with "b64" (Java, Go, Node reporters too)."""
    recs = [
        Rec(None, json.dumps({"v": 1, "keys": [["/g==", 4, marker]]}).encode()),
        Rec(None, json.dumps({"key": "/g==", "enc": marker, "count": 2}).encode()),
    ]
    counts, bad = decode("json", recs)
    assert not bad and counts == {b"\xfe": 6}
