"""Kafka record formats: what producers put in records, and how the source turns records into Batches.

Formats (chosen per source with ``format=``):

``key``       the record *key* is the accessed key; one access per record.
``raw``       the record *value* is the accessed key; one access per record.
``lines``     the value holds newline-separated keys, or ``key<TAB>count`` lines (a value
              that contains a TAB is read as counted). Values are concatenated and handed
              to the sketch's C fast path untouched, so keys must be free of TAB/CR/LF;
              per-line problems (oversized, bad count) are counted by the fast path.
``json``      the value is ``{"key": "k", "count": 3}`` (``"enc": "base64"`` for binary
              keys, ``count`` defaults to 1) or the reporter's batch object
              ``{"v": 1, "keys": [["k", 3], ["aGk=", 1, "base64"], ...]}``. Readers also
              accept ``"b64"`` for ``"base64"`` (both places): what reporters wrote in
              batch entries before 0.2, and Kafka topics still hold.
``reporter``  what :class:`hotkeyd.client.reporter.Reporter` sends: a value starting with ``{`` is
              JSON as above, anything else is ``lines``. The recommended setting for
              reporter topics, and the default.

Records are grouped into one Batch per 100 ms bucket of record timestamps (per call), with
``Batch.ts`` the newest timestamp in the bucket, so the detector's event-time policy sees
a backlog as old data rather than as a burst.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from hotkeyd.batch import Batch
from hotkeyd.protocol import limits, strictjson
from hotkeyd.protocol.wire import BASE64

__all__ = [
    "MAX_COUNT",
    "RecordDecoder",
    "RecordLike",
    "encode_count_messages",
    "encode_counts",
    "encode_json_batch",
    "encode_json_record",
    "encode_lines",
    "lines_safe",
]

MAX_COUNT = limits.COUNT_MAX
"""Largest count one entry may carry; larger ones are rejected as ``bad_count``."""

BUCKET_MS = 100
_BASE64_READ = (BASE64, "b64")  # "b64": batch entries written before 0.2
_LBRACE = 0x7B


class RecordLike(Protocol):
    """The parts of a Kafka ``ConsumerRecord`` the decoder reads."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def timestamp(self) -> int: ...


# --------------------------------------------------------------------------- encoding
def lines_safe(key: bytes) -> bool:
    """True if ``key`` can travel as a ``key<TAB>count`` line of a reporter message.

    Empty keys, keys with TAB/CR/LF, and keys starting with ``{`` (which would make the
    message look like JSON to the ``reporter`` dispatcher) go as JSON instead.
    """
    return (
        bool(key)
        and key[0] != _LBRACE
        and b"\t" not in key
        and b"\n" not in key
        and b"\r" not in key
    )


def encode_lines(items: Iterable[tuple[bytes, int]]) -> bytes:
    """``key<TAB>count\\n`` lines; every key must be :func:`lines_safe`."""
    return b"".join([k + b"\t" + str(n).encode() + b"\n" for k, n in items])


def _json_entry(key: bytes, n: int) -> list[Any]:
    try:
        return [key.decode("utf-8"), n]
    except UnicodeDecodeError:
        return [base64.b64encode(key).decode("ascii"), n, BASE64]


def encode_json_batch(items: Iterable[tuple[bytes, int]]) -> bytes:
    """The JSON batch object ``{"v":1,"keys":[[key, n], [b64key, n, "base64"], ...]}``."""
    doc = {"v": 1, "keys": [_json_entry(k, n) for k, n in items]}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_json_record(key: bytes, count: int = 1) -> bytes:
    """One ``{"key": ..., "count": n}`` record (``"enc": "base64"`` for non-UTF-8 keys)."""
    try:
        doc: dict[str, Any] = {"key": key.decode("utf-8"), "count": count}
    except UnicodeDecodeError:
        doc = {"key": base64.b64encode(key).decode("ascii"), "enc": BASE64, "count": count}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_counts(
    items: Iterable[tuple[bytes, int]], *, max_bytes: int = 256 * 1024
) -> list[bytes]:
    """Encode aggregated counts as reporter messages of at most about ``max_bytes`` each.

    Keys that are :func:`lines_safe` go as counted lines (the daemon's C fast path); the
    rest go as JSON batch objects. Both are understood by ``format=reporter``.
    """
    return [value for value, _ in encode_count_messages(items, max_bytes=max_bytes)]


def encode_count_messages(
    items: Iterable[tuple[bytes, int]], *, max_bytes: int = 256 * 1024
) -> list[tuple[bytes, list[tuple[bytes, int]]]]:
    """:func:`encode_counts`, each message with the ``(key, count)`` pairs it carries."""
    out: list[tuple[bytes, list[tuple[bytes, int]]]] = []
    lines: list[bytes] = []
    line_items: list[tuple[bytes, int]] = []
    size = 0
    odd: list[tuple[bytes, int]] = []
    odd_size = 0
    for k, n in items:
        if lines_safe(k):
            line = k + b"\t" + str(n).encode() + b"\n"
            if size + len(line) > max_bytes and lines:
                out.append((b"".join(lines), line_items))
                lines, line_items, size = [], [], 0
            lines.append(line)
            line_items.append((k, n))
            size += len(line)
        else:
            est = len(k) * 2 + 24
            if odd_size + est > max_bytes and odd:
                out.append((encode_json_batch(odd), odd))
                odd, odd_size = [], 0
            odd.append((k, n))
            odd_size += est
    if lines:
        out.append((b"".join(lines), line_items))
    if odd:
        out.append((encode_json_batch(odd), odd))
    return out


# --------------------------------------------------------------------------- decoding
class _Bucket:
    """Accesses of one 100 ms timestamp bucket."""

    __slots__ = ("counted", "counts", "keys", "plain", "ts")

    def __init__(self) -> None:
        self.ts = -1
        self.plain: list[bytes] = []
        self.counted: list[bytes] = []
        self.keys: list[bytes] = []
        self.counts: list[int] = []


def _append_value(parts: list[bytes], value: bytes) -> None:
    parts.append(value)
    if value[-1] != 0x0A:
        parts.append(b"\n")


class RecordDecoder:
    """Turns polled records into Batches and a list of rejected records.

    Args:
        fmt: one of ``reporter``, ``key``, ``raw``, ``lines``, ``json``.
        max_key_len: longest key accepted (bytes); longer ones are rejected as ``oversized``.
        source: ``Batch.source`` label.
        scale: ``Batch.scale`` (rate multiplier when N daemons each see 1/N of a key).
    """

    def __init__(
        self, fmt: str, *, max_key_len: int = 1024, source: str = "kafka", scale: float = 1.0
    ) -> None:
        if fmt not in ("reporter", "key", "raw", "lines", "json"):
            raise ValueError(f"unknown record format {fmt!r}")
        self.fmt = fmt
        self.max_key_len = max_key_len
        self.source = source
        self.scale = scale

    def decode(
        self, records: Iterable[RecordLike]
    ) -> tuple[list[Batch], list[tuple[str, RecordLike]]]:
        """Decode ``records``; return the batches and ``(reason, record)`` for each bad record."""
        buckets: dict[int, _Bucket] = {}
        bad: list[tuple[str, RecordLike]] = []
        fmt = self.fmt
        maxlen = self.max_key_len
        for rec in records:
            # One record at a time: whatever one record does (deep JSON nesting raising
            # RecursionError, a broker handing over odd types), it is that record that is
            # bad; the others of the poll still count.
            try:
                reason = self._decode_one(rec, buckets, fmt, maxlen)
            except Exception:
                reason = "undecodable"
            if reason is not None:
                bad.append((reason, rec))
        return self._batches(buckets), bad

    def _decode_one(
        self, rec: RecordLike, buckets: dict[int, _Bucket], fmt: str, maxlen: int
    ) -> str | None:
        """Add one record's accesses to its bucket; return a reason if it is (partly) bad."""
        ts = rec.timestamp
        b = ts // BUCKET_MS if ts is not None and ts >= 0 else -1
        cur = buckets.get(b)
        if cur is None:
            cur = buckets[b] = _Bucket()
        if ts is not None and ts > cur.ts:
            cur.ts = ts
        if fmt == "key" or fmt == "raw":
            k = rec.key if fmt == "key" else rec.value
            if k is None:
                return "no_key" if fmt == "key" else "empty"
            if len(k) > maxlen:
                return "oversized"
            if not k:
                return "empty"
            cur.keys.append(bytes(k))
            return None
        v = rec.value
        if not v:
            return "empty"
        if fmt == "lines" or (fmt == "reporter" and v[0] != _LBRACE):
            _append_value(cur.counted if b"\t" in v else cur.plain, bytes(v))
            return None
        scratch = _Bucket()  # nothing of a JSON value counts unless all of it was read
        reason = self._decode_json(v, scratch)
        cur.keys.extend(scratch.keys)
        cur.counts.extend(scratch.counts)
        return reason

    def _decode_json(self, value: bytes, acc: _Bucket) -> str | None:
        """Add the accesses of one JSON value to ``acc``; return a reason if (partly) bad."""
        try:
            doc = strictjson.loads(value)
        except strictjson.JSONRejected:
            return "undecodable"
        if not isinstance(doc, dict):
            return "wrong_format"
        if "keys" in doc:
            if doc.get("v") != 1 or not isinstance(doc["keys"], list):
                return "wrong_format"
            reason = None
            for entry in doc["keys"]:
                r = self._json_entry(entry, acc)
                if r is not None and reason is None:
                    reason = r
            return reason
        key = doc.get("key")
        if not isinstance(key, str):
            return "wrong_format"
        single: list[Any] = [key, doc.get("count", 1)]
        if doc.get("enc") in _BASE64_READ:
            single.append(BASE64)
        elif doc.get("enc") not in (None, "utf-8"):
            return "wrong_format"
        return self._json_entry(single, acc)

    def _json_entry(self, entry: Any, acc: _Bucket) -> str | None:
        if not isinstance(entry, list) or len(entry) not in (2, 3) or not isinstance(entry[0], str):
            return "wrong_format"
        n = entry[1]
        if type(n) is not int or n < 1 or n > MAX_COUNT:
            return "bad_count"
        if len(entry) == 3:
            if entry[2] not in _BASE64_READ:
                return "wrong_format"
            try:
                key = base64.b64decode(entry[0], validate=True)
            except (binascii.Error, ValueError):
                return "undecodable"
        else:
            key = entry[0].encode("utf-8", "surrogatepass")
        if len(key) > self.max_key_len:
            return "oversized"
        if not key:
            return "empty"
        acc.keys.append(key)
        acc.counts.append(n)
        return None

    def _batches(self, buckets: dict[int, _Bucket]) -> list[Batch]:
        out: list[Batch] = []
        src, scale = self.source, self.scale
        for b in sorted(buckets):
            acc = buckets[b]
            ts = acc.ts / 1000.0 if acc.ts >= 0 else None
            if acc.plain:
                out.append(
                    Batch(lines=b"".join(acc.plain), counted=False, ts=ts, scale=scale, source=src)
                )
            if acc.counted:
                out.append(
                    Batch(lines=b"".join(acc.counted), counted=True, ts=ts, scale=scale, source=src)
                )
            if acc.keys:
                counts: Sequence[int] | None = acc.counts if acc.counts else None
                out.append(Batch(keys=acc.keys, counts=counts, ts=ts, scale=scale, source=src))
        return out
