"""update_lines: the fast path for newline-delimited batches. Bad lines are counted, never raised."""

from __future__ import annotations

from typing import Any


def test_plain_lines(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16)
    assert sk.update_lines(b"a\nb\r\na\n\n\r\nc") == (4, 0, 0)
    assert sk.topk() == [(b"a", 2), (b"b", 1), (b"c", 1)]


def test_final_line_without_newline_counts(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16)
    assert sk.update_lines(b"tail") == (1, 0, 0)
    assert sk.update_lines(b"") == (0, 0, 0)
    assert sk.update_lines(b"\n\n") == (0, 0, 0)
    assert sk.topk() == [(b"tail", 1)]


def test_oversized_lines_are_counted_and_skipped(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16, max_key_len=4)
    assert sk.update_lines(b"abcd\nabcde\r\nxy\n" + b"z" * 100) == (2, 2, 0)
    assert sk.topk() == [(b"abcd", 1), (b"xy", 1)]


def test_binary_keys_with_spaces_quotes_tabs(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16)
    keys = [b'a "quoted" key', b"tab\there", b"\x00\xff\xfe", b" "]
    assert sk.update_lines(b"\n".join(keys)) == (4, 0, 0)
    assert sorted(k for k, _ in sk.topk()) == sorted(keys)


def test_counted_lines(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16)
    buf = b"a\t5\r\nb\t0\nkey\twith\ttabs\t2\n\t3\nc\t0007\n"
    assert sk.update_lines(buf, counted=True) == (17, 0, 0)
    assert sk.topk() == [(b"c", 7), (b"a", 5), (b"", 3), (b"key\twith\ttabs", 2)]


def test_counted_malformed(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16, max_key_len=8)
    bad = [
        b"nocount",  # no tab
        b"a\t",  # empty count
        b"a\t-1",  # sign
        b"a\t+1",
        b"a\t1.5",
        b"a\t 1",
        b"a\t4294967296",  # > 2^32-1
        b"a\t99999999999999999999999",
        b"a\t\xd9\xa1",  # non-ASCII digit
    ]
    buf = b"\n".join([*bad, b"ok\t4294967295", b"toolongkey\t1"])
    assert sk.update_lines(buf, counted=True) == (4294967295, 1, len(bad))
    assert sk.topk() == [(b"ok", 4294967295)]


def test_bytes_like_buffers(cls: Any) -> None:
    sk = cls(k=10, memory=1 << 16)
    assert sk.update_lines(bytearray(b"a\nb\n")) == (2, 0, 0)
    assert sk.update_lines(memoryview(b"xa\nb\n")[1:]) == (2, 0, 0)
    assert sk.topk() == [(b"a", 2), (b"b", 2)]
